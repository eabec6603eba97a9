import { ABSENT, CLUSTER_SPLIT, GIVEN_SPLIT } from '../protocol';
import { FOREIGN, LEGACY_KEY, PRELUDE } from './prelude';

/**
 * An algorithm as pure Lua functions over the numbers of its state (DESIGN-24 D6), for
 * {@link stringScript}. `decide` defines what a decision needs, every run: `prepare(limit, window)`
 * makes the rule table the others take, and `decide(r, now, permits, body)` gives granted,
 * remaining, retryAfterMs, resetAfterMs, then the state after a grant. `rest` defines, only when a
 * call needs them, `fresh(r)`, `charge(r, now, permits, body)` (remaining, resetAfterMs, whether the
 * debt bound forgave part of it, the state after), `used(r, now, body)` (what a carry-over moves),
 * `legacy(r, state)` (what the previous version stored: the body, then the block end), and for
 * receipts either (a bucket, `folds`) `level`, `deficit`, `lower`, `owed`, `minus` and `give`, for
 * refunds bounded by the suffix minimum, or (a window) `mark(r, body)`, what a receipt records, and
 * `refund(r, now, permits, mark, body)`. No storage, blocks or receipts lists in either.
 */
export interface StringCodec {
  /** Lua names of the state's numbers, in stored order. */
  readonly body: readonly string[];
  readonly folds: boolean;
  /** A Lua expression of `r` and the body's names: whether they are a state of this algorithm. */
  readonly valid: string;
  readonly decide: string;
  readonly rest: string;
}

/**
 * One algorithm's script over a string key: the shell owns everything that is not the algorithm.
 *
 * A key holds packed doubles: the rule it is counted under (limit, windowMs) and the server time its
 * expiry was set to (less 1 ms), then the codec's state; once blocked or reserved, a tail of the
 * block end (-inf for none) and the outstanding receipts, oldest first, three doubles each (id and
 * what the codec records). The expiry is set with `slack` to spare (a quarter window, at most a
 * minute) and set again only when less than half of that is left: until then a decision overwrites
 * the state in place (`SETRANGE`), which costs half of what `SET ... PX` does.
 *
 * A key counted under another rule is carried over at the call (as `KeyedRateLimiter.reconfigure`:
 * what the old state counts as used, debt included, charged to a fresh state under the new rule;
 * the block kept, the receipts voided). A key absent under its name is looked for under the
 * previous version's name for the call's rule (the key less its first `split` bytes, then
 * `limit/windowMs:`, then the rest): what it counted and its block are adopted and it is deleted.
 * On a cluster that key is in another slot, out of the script's reach: there the call answers
 * absent (`N`), the engine reads the previous key in its own slot and sends the call again with
 * what it read, which is adopted only if the key is still absent (so two processes never adopt it
 * twice), and the engine deletes the previous key. A peek does both in its answer and writes nothing.
 */
export function stringScript(codec: StringCodec, leases = false): string {
  const n = codec.body.length;
  const body = codec.body.join(', ');
  const next = codec.body.map((name) => `new_${name}`).join(', ');
  const size = 24 + 8 * n;
  const format = `'<ddd${'d'.repeat(n)}'`;
  const bodyFormat = `'<${'d'.repeat(n)}'`;
  const hot = topLevelLocals(PRELUDE + codec.decide);
  const fold = codec.folds
    ? `
-- The lowest deficit of the newest receipt's stretch (D4): lowered to the deficit now, before an event.
function fold(r, s, now)
  local units, partial = level(r, now, unpack(s.body))
  local last = #s.rc
  if last == 0 then return end
  local x, y = deficit(r, units, partial)
  if lower(x, y, s.rc[last - 1], s.rc[last]) then s.rc[last - 1], s.rc[last] = x, y end
end`
    : '';
  const receiptOf = codec.folds ? `local x, y = deficit(r, s.body[1], s.body[2])` : `local x, y = mark(r, unpack(s.body)), 0`;
  const refundBody = codec.folds
    ? `fold(r, s, now)
    s.body = { level(r, now, unpack(s.body)) }
    -- What the receipt may give back: the lowest deficit since its grant, over it and every later stretch.
    local mx, my = s.rc[3 * i - 1], s.rc[3 * i]
    for k = i + 1, #s.rc / 3 do
      if lower(s.rc[3 * k - 1], s.rc[3 * k], mx, my) then mx, my = s.rc[3 * k - 1], s.rc[3 * k] end
    end
    local gx, gy = owed(r, permits, mx, my)
    s.body[1], s.body[2] = give(r, s.body[1], s.body[2], gx, gy)
    for k = i, #s.rc / 3 do s.rc[3 * k - 1], s.rc[3 * k] = minus(r, s.rc[3 * k - 1], s.rc[3 * k], gx, gy) end
    -- Its stretch joins the previous receipt's.
    if i > 1 and lower(s.rc[3 * i - 1], s.rc[3 * i], s.rc[3 * i - 4], s.rc[3 * i - 3]) then s.rc[3 * i - 4], s.rc[3 * i - 3] = s.rc[3 * i - 1], s.rc[3 * i] end`
    : `s.body = { refund(r, now, permits, s.rc[3 * i - 1], unpack(s.body)) }`;
  return `${PRELUDE}${codec.decide}
-- What only a call on a key that is not a plain state under its rule, or an operation, needs:
-- take and operations, and all they call, made on first need by rare (see dispatch).
local function rare(${hot})
local fresh, valid, charge, used, legacy, legacy_tail, level, deficit, lower, owed, minus, give, mark, refund, fold, load, save, take, operations${leases ? ', place, release, inflight, combined, wait_from' : ''}
${LEGACY_KEY}${LEGACY_TAIL}
function valid(${['r', ...codec.body].join(', ')})
  return ${codec.valid}
end
${codec.rest}
-- The key as stored: its state under the call's rule r (carried over from another rule, or adopted
-- from the previous version's key), block end and receipts; state is what GET gave, when read.
-- Writes nothing. split: where the previous key's name puts the rule (0 nowhere; on a cluster, the
-- first try, or on the second what the engine read of that key, see dispatch). With stays (a refund,
-- an extension: they never change a key's rule), a key counted under another rule is read under
-- that rule, s.r, and not carried over.
function load(key, r, now, split, state, stays)
  local s = { block = -math.huge, rc = {}, ${leases ? 'ls = {}, ' : ''}expires = -math.huge, dirty = false, kept = 0, size = 0 }
  if state == nil then state = redis.call('GET', key) end
  if not state then
    s.body = { fresh(r) }
    if split == 0 then return s end
    local old, old_key
    if type(split) == 'table' then
      -- A cluster's second try: the previous key as the engine read it in its own slot, in hex, and
      -- its PTTL (-2: no key); the engine deletes it once this call has adopted it.
      if split[2] == -2 then return s end
      old, s.kept = string.gsub(split[1], '%x%x', function(x) return string.char(tonumber(x, 16)) end), split[2]
    elseif split == ${CLUSTER_SPLIT} then
      -- A cluster's first try: the previous key is in another slot, which the engine reads.
      error('${ABSENT}', 0)
    else
      old_key = legacy_key(key, r, split)
      old = redis.call('GET', old_key)
      if not old then return s end
      s.kept, s.legacy = redis.call('PTTL', old_key), old_key
    end
    local v = { legacy(r, old) }
    s.body, s.block = { unpack(v, 1, ${n}) }, v[${n + 1}]
    if not (valid(r, unpack(s.body)) and s.block == s.block and s.block < math.huge) then ${FOREIGN} end
    s.dirty = true
    return s
  end
  local length = #state
${leases ? LEASED_LENGTH(size) : `  local receipts = (length - ${size} - 8) / 24
  if length ~= ${size} and not (receipts >= 0 and receipts <= MAX_RECEIPTS and receipts % 1 == 0) then`}
    error('ratekeeper: the key holds ' .. length .. ' bytes, not a state of this algorithm')
  end
  local v = { struct.unpack(${format}, state) }
  local limit, window = v[1], v[2]
  s.expires, s.body, s.size = v[3], { unpack(v, 4, ${3 + n}) }, length
  if length > ${size} then
    s.block = struct.unpack('<d', state, ${size} + 1)
    if not (s.block == s.block and s.block < math.huge) then ${FOREIGN} end
${leases ? LEASES_READ(size) : ''}    for at = ${leases ? 'first' : `${size} + 9`}, length, 24 do
      local id, x, y = struct.unpack('<ddd', state, at)
      if not (id >= 1 and id % 1 == 0 and x == x and y == y) then ${FOREIGN} end
      s.rc[#s.rc + 1], s.rc[#s.rc + 2], s.rc[#s.rc + 3] = id, x, y
    end
  end
  if limit == r.limit and window == r.window then
    if not valid(r, unpack(s.body)) then ${FOREIGN} end
    return s
  end
  if not (limit % 1 == 0 and limit >= 1 and limit <= MAX_SAFE and window % 1 == 0 and window >= 1 and window <= MAX_WINDOW) then ${FOREIGN} end
  local before = prepare(limit, window)
  if not valid(before, unpack(s.body)) then ${FOREIGN} end
  if stays then
    s.r = before
    return s
  end
  local counted = used(before, now, unpack(s.body))
  s.body, s.rc, s.dirty = { fresh(r) }, {}, true
  if counted > 0 then s.body = { select(4, charge(r, now, math.min(counted, MAX_SAFE), unpack(s.body))) } end
  return s
end

-- Writes the key: in place while its expiry still covers what the state needs (reset ms from now,
-- and the block) and the size stays, else in full with a new expiry (never less than an adopted
-- key had left).
function save(key, r, s, now, server_now, reset)
  local tail = ''
  if s.block > -math.huge or #s.rc > 0${leases ? ' or #s.ls > 0' : ''} then
    local parts = { struct.pack('<d', s.block) }${leases ? LEASES_WRITE : ''}
    for k = 1, #s.rc, 3 do parts[#parts + 1] = struct.pack('<ddd', s.rc[k], s.rc[k + 1], s.rc[k + 2]) end
    tail = table.concat(parts)
  end
  local block = math.ceil(${leases ? 'math.max(s.block, s.ls[#s.ls] or -math.huge)' : 's.block'} - now)
  if not s.dirty and ${size} + #tail == s.size and server_now + math.max(reset + r.slack / 2, block) <= s.expires then
    redis.call('SETRANGE', key, 24, struct.pack(${bodyFormat}, unpack(s.body)) .. tail)
    return
  end
  -- At least 1 ms: a window of 3 ms or less has no slack, and a key as good as new may still be written (SET PX 0 is an error).
  local ttl = math.max(reset + r.slack, block, s.kept, 1)
  redis.call('SET', key, struct.pack(${format}, r.limit, r.window, server_now + ttl - 1, unpack(s.body)) .. tail, 'PX', ms(ttl))
  if s.legacy then redis.call('DEL', s.legacy) end
end
${fold}
${leases ? leaseOperations(codec, refundBody) : `-- tryAcquire (id nil) or reserve (id the caller's receipt id) on any key (state: what GET gave, if read).
function take(key, r, now, permits, server_now, split, id, state)
  local s = load(key, r, now, split, state)
  local granted, remaining, retry, reset, ${next} = decide(r, now, permits, unpack(s.body))
  if s.block > now then
    if s.dirty then save(key, r, s, now, server_now, reset) end
    local wait = math.ceil(s.block - now)
    return false, 0, math.max(wait, retry), math.max(wait, reset)
  end
  if granted then
    ${codec.folds ? 'fold(r, s, now)' : ''}
    s.body = { ${next} }
    if id then
      ${receiptOf}
      s.rc[#s.rc + 1], s.rc[#s.rc + 2], s.rc[#s.rc + 3] = id, x, y
      -- Past the bound the oldest receipt is voided: its refund gives nothing.
      if #s.rc > 3 * MAX_RECEIPTS then table.remove(s.rc, 1) table.remove(s.rc, 1) table.remove(s.rc, 1) end
    end
    save(key, r, s, now, server_now, reset)
  elseif s.dirty then
    save(key, r, s, now, server_now, reset)
  end
  return granted, remaining, retry, reset
end

function operations(OPERATIONS, decision)
  -- A decision sent alone: a cluster's second try of a key it found absent.
  function OPERATIONS.decide(key, r, now, server_now, split, permits)
    return decision(take(key, r, now, tonumber(permits), server_now, split))
  end
  function OPERATIONS.peek(key, r, now, server_now, split, permits)
    local s = load(key, r, now, split)
    local granted, remaining, retry, reset = decide(r, now, tonumber(permits), unpack(s.body))
    if s.block > now then
      local wait = math.ceil(s.block - now)
      return decision(false, 0, math.max(wait, retry), math.max(wait, reset))
    end
    return decision(granted, remaining, retry, reset)
  end
  function OPERATIONS.reserve(key, r, now, server_now, split, permits, id)
    return decision(take(key, r, now, tonumber(permits), server_now, split, tonumber(id)))
  end
${settleOf(refundBody)}  -- Never refused, and a block neither stops it nor is lifted by it; reaching the debt bound voids
  -- the receipts (a refund could otherwise give back what the bound forgave). With an id, the
  -- charge settles that reservation above what it reserved: its receipt goes first.
  function OPERATIONS.charge(key, r, now, server_now, split, permits, id)
    local s = load(key, r, now, split)
    if id then settle(r, s, now, 0, tonumber(id)) end
    ${codec.folds ? 'fold(r, s, now)' : ''}
    local v = { charge(r, now, tonumber(permits), unpack(s.body)) }
    s.body = { unpack(v, 4, ${3 + n}) }
    if v[3] then s.rc = {} end
    save(key, r, s, now, server_now, v[2])
    return decision(true, v[1], 0, v[2])
  end
  -- A settle below what was reserved, under the key's own rule (see dispatch). Answers the state
  -- now, the block aside, as a settle does.
  function OPERATIONS.refund(key, r, now, server_now, split, permits, id)
    local s = load(key, r, now, split, nil, true)
    r = s.r or r
    local held = settle(r, s, now, tonumber(permits), tonumber(id))
    local granted, remaining, retry, reset = decide(r, now, 0, unpack(s.body))
    if held or s.dirty then save(key, r, s, now, server_now, reset) end
    return decision(granted, remaining, retry, reset), s.r
  end
  function OPERATIONS.block(key, r, now, server_now, split, duration)
    local s = load(key, r, now, split)
    local ends = now + tonumber(duration)
    if s.block >= ends and not s.dirty then return 'OK' end
    s.block = math.max(s.block, ends)
    local _, _, _, reset = decide(r, now, 0, unpack(s.body))
    save(key, r, s, now, server_now, reset)
    return 'OK'
  end
${RESET}end
`}return take, operations
end
local take, operations
${leases ? leaseDispatch(hot) : `
-- A decision: a key holding just a state under the call's rule is decided and written in place
-- here; any other (absent, blocked, reserved, under another rule) answers nil and what GET gave,
-- for take. (struct's functions as locals, as the prelude's are.)
local pack, unpack_doubles = struct.pack, struct.unpack
local function decide_key(key, r, now, permits, server_now, split)
  local state = call('GET', key)
  if state and #state == ${size} then
    local limit, window, expires, ${body} = unpack_doubles(${format}, state)
    if limit == r.limit and window == r.window then
      if not (${codec.valid}) then ${FOREIGN} end
      local granted, remaining, retry, reset, ${next} = decide(r, now, permits, ${body})
      if granted then
        if server_now + reset + r.slack / 2 <= expires then
          call('SETRANGE', key, 24, pack(${bodyFormat}, ${next}))
        else
          redis.call('SET', key, struct.pack(${format}, limit, window, server_now + reset + r.slack - 1, ${next}), 'PX', ms(reset + r.slack))
        end
      end
      return granted, remaining, retry, reset
    end
  end
  return nil, state
end
${dispatch(hot)}`}`;
}

/** Gives a receipt's refund back (see stringScript's `refundBody`): a local function of `operations`. */
function settleOf(refundBody: string): string {
  return `  -- Gives back what receipt id still may (nothing for an id the key no longer holds) and drops it;
  -- whether the key held it.
  local function settle(r, s, now, permits, id)
    local i
    for k = 1, #s.rc / 3 do if s.rc[3 * k - 2] == id then i = k end end
    if not i then return false end
    ${refundBody}
    table.remove(s.rc, 3 * i - 2) table.remove(s.rc, 3 * i - 2) table.remove(s.rc, 3 * i - 2)
    return true
  end
`;
}

/** The reset operation: the key, and on a standalone server the previous version's key, deleted. */
const RESET = `  function OPERATIONS.reset(key, r, now, server_now, split)
    redis.call('DEL', key)
    if split > 0 then redis.call('DEL', legacy_key(key, r, split)) end
    return 'OK'
  end
`;

/**
 * For a codec's `legacy`: the block end of the previous version's tail at byte `at` (block end, a
 * stamp, and for a bucket maybe a count of units refunds gave back), checked as that version did.
 */
const LEGACY_TAIL = `
function legacy_tail(state, at)
  local block, stamp = struct.unpack('<dd', state, at)
  if not (stamp >= 0 and stamp <= ${2 ** 52} and stamp % 1 == 0 and block == block and block < math.huge) then ${FOREIGN} end
  if #state == at + 23 then
    local credited = struct.unpack('<d', state, at + 16)
    if not (credited >= 0 and credited <= MAX_SAFE) then ${FOREIGN} end
  end
  return block
end
`;

/**
 * What every script does with its call (the shell's dispatch), given the names `rare` takes (see
 * {@link topLevelLocals}): `rare(...)` returns `take` and `operations`, the slow path of a decision
 * that `decide_key` answered nil, and the operations.  ARGV[1] is either a number (a batch of
 * decisions, below) or the name of an operation on one key (a letter).
 *
 * A batch of calls under one rule: ARGV[1] the legacy split (see stringScript; 0 for none; -1 on a
 * cluster, where a key absent answers `N`), then the rule's limit and windowMs. Under several: ARGV[1] minus their number, ARGV[2] the split, each
 * rule's limit and windowMs, then the index of each key's rule. Then the permits, one per key,
 * left out when all are 1 and the server's clock decides; then, when the caller's clock decides,
 * its readings in ms, one per key. Without readings the server's clock decides, read once per
 * script (decisions batched together were asked for in the same instant), floored to whole ms as
 * `systemClock` is. Replies one string per key: `A remaining resetAfterMs`, `R remaining
 * retryAfterMs resetAfterMs`, or `E message` when that key's decision failed (`decide_key` runs
 * under `pcall`, so one bad key fails only its own decision). Numbers are whole and below 2^53:
 * '%d' writes them exactly, at less than half the cost of '%.17g'.
 *
 * An operation: ARGV[2] the caller's reading ('' for the server's clock), ARGV[3] the split,
 * ARGV[4..5] the rule, then its arguments (permits, then a receipt id for reserve and refund, or a
 * block's duration). Replies a decision as above, 'OK', 'N' (absent, on a cluster), or 'E
 * message'. A cluster's second try of a call that answered `N` (a decision goes as the operation
 * `decide`) has the split -2, then ARGV[6..7] what the engine read of the previous key (its value and
 * PTTL, -2 for no key), then the operation's arguments.
 *
 * A refund (a settle, a cancel) and an extension never change a key's rule: sent under the rule
 * the reservation was made under, they act on a key counted under another rule (a later call
 * carried it over, voiding the receipts; the leases stay) under that rule, converting nothing. A
 * refund's decision is then preceded by the key's rule, `S<limit>/<windowMs> `; its second value
 * (that rule's table) tells the dispatch so.
 */
export function dispatch(hot: string): string {
  // rare is called where the loop's own locals are in scope: a name of both would pass the wrong value.
  const clash = hot.split(', ').find((name) => LOOP_LOCALS.includes(name));
  if (clash !== undefined) throw new Error(`ratekeeper: a script's top level declares ${clash}, a name its dispatch uses`);
  return `
local time = redis.call('TIME')
local server_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if string.byte(ARGV[1]) > 57 then
${operation(hot, false)}
end
local count = #KEYS
local split, r, base, chosen, each = tonumber(ARGV[1]), nil, 3, nil, nil
if split >= ${CLUSTER_SPLIT} then
  r = prepare(tonumber(ARGV[2]), tonumber(ARGV[3]))
else
  -- Calls under several rules: -(their number), the split, the rules, then each key's rule.
  local rules = -split
  split = tonumber(ARGV[2])
  each = {}
  for j = 1, rules do each[j] = prepare(tonumber(ARGV[1 + 2 * j]), tonumber(ARGV[2 + 2 * j])) end
  chosen = 2 + 2 * rules
  base = chosen + count
end
local readings = #ARGV > base + count
local permits_left_out = #ARGV == base
local reply = {}
for i = 1, count do
  local now, permits = server_now, 1
  if readings then now = tonumber(ARGV[base + count + i]) end
  if not permits_left_out then permits = tonumber(ARGV[base + i]) end
  if chosen then r = each[tonumber(ARGV[chosen + i])] end
  local ok, granted, remaining, retry, reset = pcall(decide_key, KEYS[i], r, now, permits, server_now, split)
  if ok and granted == nil then
    if not take then take, operations = rare(${hot}) end
    ok, granted, remaining, retry, reset = pcall(take, KEYS[i], r, now, permits, server_now, split, nil, remaining)
  end
  if not ok then
    reply[i] = granted == '${ABSENT}' and granted or 'E ' .. tostring(type(granted) == 'table' and granted.err or granted)
  elseif granted then
    reply[i] = format('A %d %d', remaining, reset)
  else
    reply[i] = format('R %d %d %d', remaining, retry, reset)
  end
end
return reply
`;
}

const LOOP_LOCALS = ['time', 'server_now', 'count', 'split', 'r', 'base', 'chosen', 'each', 'readings', 'permits_left_out', 'reply', 'now', 'permits', 'ok', 'granted', 'remaining', 'retry', 'reset', 'i', 'take', 'operations'];

/**
 * The names a script's top level declares before `rare`, which rare takes as its parameters: a
 * function created each run captures each outer local it uses, and each capture walks the list of
 * those already captured, so a rare made with a dozen captures cost a decision 10% more CPU (the
 * log of bench runs in the report of issue 24); made with none it costs nothing until called.
 */
export function topLevelLocals(lua: string): string {
  return [...lua.matchAll(/^local (?:function )?([A-Za-z_][\w, ]*?)(?: =|\(|$)/gm)].flatMap(([, names]) => names!.split(',').map((name) => name.trim())).join(', ');
}

// Leases (issue 25, DESIGN-25 S3): generated only into the scripts of limiters with an in-flight
// limit, so a rate alone runs exactly the script it ran before. A leased key's tail is the block
// end, the number of leases, the leases (receipt id, permits, end), then the receipts: 16 bytes
// past the state and a multiple of 24, where a tail without leases is 8 past it, so each script
// tells them apart (a rate-alone script refuses a leased key as not its state). The leases are kept
// in end order (ties in grant order), as `Concurrency` keeps them, and those ended at the call's
// time are dropped as the key is read. Each call carries the in-flight limit and lease length
// (ARGV[8] and ARGV[9]; ARGV[7] is '' when it names no receipt).

/** The most leases a key holds: every lease holds a permit of an in-flight limit of at most this. */
const MAX_LEASES = 4096;

/** The length check of a leased script's load (the plain one's, with leases allowed for). */
const LEASED_LENGTH = (size: number) => `  local leased = length > ${size} and (length - ${size}) % 24 == 16
  local receipts = (length - ${size} - (leased and 16 or 8)) / 24
  if length ~= ${size} and not (receipts >= 0 and receipts <= MAX_RECEIPTS + ${MAX_LEASES} and receipts % 1 == 0) then`;

/** Reads the leases after the block end (those not ended at `now`), leaving `first` at the receipts. */
const LEASES_READ = (size: number) => `    local first = ${size} + 9
    if leased then
      local count = struct.unpack('<d', state, first)
      if not (count >= 1 and count <= receipts and count % 1 == 0) then ${FOREIGN} end
      first = first + 8
      for _ = 1, count do
        local id, permits, ends = struct.unpack('<ddd', state, first)
        if not (id >= 1 and id % 1 == 0 and permits >= 1 and permits % 1 == 0 and ends == ends and ends < math.huge) then ${FOREIGN} end
        if ends > now then s.ls[#s.ls + 1], s.ls[#s.ls + 2], s.ls[#s.ls + 3] = id, permits, ends end
        first = first + 24
      end
    end
`;

/** Writes the leases after the block end, when there are any. */
const LEASES_WRITE = `
    if #s.ls > 0 then
      parts[2] = struct.pack('<d', #s.ls / 3)
      for k = 1, #s.ls, 3 do parts[#parts + 1] = struct.pack('<ddd', s.ls[k], s.ls[k + 1], s.ls[k + 2]) end
    end`;

/**
 * The leased scripts' pieces every rate shares (the string shell's and the sliding-window log's):
 * `place`, `release`, `inflight` (the `Concurrency`'s decision over `s.ls`) and `combined` (with a
 * rate, `Composite`'s over `decide(r, t, permits, unpack(s.body))` and `inflight`, with `wait_from`),
 * as functions the caller has declared local.
 */
export function leasePieces(rate: boolean): string {
  const combined = rate
    ? `
-- Composite.peek: the part with the fewest permits binds (the rate on a tie); a refusal's retry is
-- the first time both allow, and its reset the first time after that both are as new. Last, the
-- wait the rate alone proves (its own retry): a release may end the in-flight part's sooner, never it.
function combined(r, s, now, permits, limit, lease)
  local g1, rem1, ret1, res1 = decide(r, now, permits, unpack(s.body))
  local g2, rem2, ret2, res2 = inflight(s, limit, lease, now, permits)
  local reset = math.max(res1, res2)
  if permits == 0 then
    if rem2 < rem1 then return true, limit, rem2, 0, reset, 0 end
    return true, r.limit, rem1, 0, reset, 0
  end
  local has1, has2 = rem1, rem2
  if g1 then has1 = rem1 + permits end
  if g2 then has2 = rem2 + permits end
  local bound, available = r.limit, has1
  if has2 < has1 then bound, available = limit, has2 end
  local longest = math.max(ret1, ret2)
  if longest == 0 then return true, bound, available - permits, 0, reset, 0 end
  local retry = wait_from(r, s, now, permits, longest, limit, lease)
  return false, bound, available, retry, wait_from(r, s, now, 0, retry, limit, lease), ret1
end

-- Composite.waitFrom: the first whole ms from wait on at which both parts allow (permits 0: are as
-- new). A rate's clock may be ahead of the call's (a settle at a later reading): until the guess
-- passes it, the rate answers the same short retry at every guess. So each step is at least twice
-- the last, and once a guess lands where both allow, the first such ms is searched for between the
-- last refusal and it: about 2 * 42 guesses at most, whatever the clocks.
function wait_from(r, s, now, permits, wait, limit, lease)
  local function longest_at(t)
    local _, _, a_retry, a_reset = decide(r, t, permits, unpack(s.body))
    local _, _, b_retry, b_reset = inflight(s, limit, lease, t, permits)
    if permits == 0 then return math.max(a_reset, b_reset) end
    return math.max(a_retry, b_retry)
  end
  local step, refused = 0, wait - 1
  local longest = longest_at(now + wait)
  while longest ~= 0 do
    if wait + longest >= MAX_WINDOW then return MAX_WINDOW end
    if now + wait + longest == now + wait then return wait + longest end
    refused = wait + longest - 1
    step = math.max(longest, 2 * step)
    wait = math.min(wait + step, MAX_WINDOW - 1)
    longest = longest_at(now + wait)
  end
  while wait - refused > 1 do
    local middle = refused + math.floor((wait - refused) / 2)
    if longest_at(now + middle) == 0 then wait = middle else refused = middle end
  end
  return wait
end`
    : `
function combined(r, s, now, permits, limit, lease)
  local granted, remaining, retry, reset = inflight(s, limit, lease, now, permits)
  return granted, limit, remaining, retry, reset, 0
end`;
  return `-- Puts a lease in end order, after those ending at the same time.
function place(s, id, permits, ends)
  local i = #s.ls + 1
  while i > 1 and s.ls[i - 1] > ends do i = i - 3 end
  table.insert(s.ls, i, ends) table.insert(s.ls, i, permits) table.insert(s.ls, i, id)
end

-- Drops lease id; whether the key held it.
function release(s, id)
  for k = 1, #s.ls, 3 do
    if s.ls[k] == id then
      table.remove(s.ls, k) table.remove(s.ls, k) table.remove(s.ls, k)
      return true
    end
  end
  return false
end

-- Concurrency.peek at time t (the leases ending after t hold): granted, remaining, retry, reset.
function inflight(s, limit, lease, t, permits)
  local held, last = 0, nil
  for k = 1, #s.ls, 3 do
    if s.ls[k + 2] > t then held, last = held + s.ls[k + 1], s.ls[k + 2] end
  end
  local free = limit - held
  local reset = 0
  if last then reset = math.min(MAX_WINDOW, math.ceil(last - t)) end
  if permits == 0 then return true, math.max(free, 0), 0, reset end
  if permits <= free then return true, free - permits, 0, math.min(MAX_WINDOW, math.ceil(math.max(last and last - t or 0, lease))) end
  local needed, freed = permits - free, 0
  for k = 1, #s.ls, 3 do
    if s.ls[k + 2] > t then
      freed = freed + s.ls[k + 1]
      if freed >= needed then return false, math.max(free, 0), math.max(1, math.min(MAX_WINDOW, math.ceil(s.ls[k + 2] - t))), reset end
    end
  end
  return false, math.max(free, 0), MAX_WINDOW, reset
end
${combined}`;
}

/**
 * A leased script's reserve (`take`) and operations. Every decision is the in-memory
 * `Composite([rate, Concurrency])`'s (src/algorithms/composite.ts), or the `Concurrency`'s alone
 * for the body-less codec: `combined` answers granted, the binding limit, remaining, retryAfterMs
 * and resetAfterMs, and decisions reply with the binding limit last.
 */
function leaseOperations(codec: StringCodec, refundBody: string): string {
  const rate = codec.body.length > 0;
  const receiptOf = codec.folds ? `local x, y = deficit(r, s.body[1], s.body[2])` : `local x, y = mark(r, unpack(s.body)), 0`;
  return `${leasePieces(rate)}
-- reserve: the rate's grant (and its receipt) and a lease, both or neither.
function take(key, r, now, permits, server_now, split, id, limit, lease)
  local s = load(key, r, now, split)
  local granted, bound, remaining, retry, reset, least = combined(r, s, now, permits, limit, lease)
  if s.block > now then
    if s.dirty then save(key, r, s, now, server_now, reset) end
    local wait = math.ceil(s.block - now)
    return false, bound, 0, math.max(wait, retry), math.max(wait, reset), math.max(wait, least)
  end
  if granted then${
    rate
      ? `
    ${codec.folds ? 'fold(r, s, now)' : ''}
    s.body = { select(5, decide(r, now, permits, unpack(s.body))) }
    ${receiptOf}
    s.rc[#s.rc + 1], s.rc[#s.rc + 2], s.rc[#s.rc + 3] = id, x, y
    if #s.rc > 3 * MAX_RECEIPTS then table.remove(s.rc, 1) table.remove(s.rc, 1) table.remove(s.rc, 1) end`
      : ''
  }
    place(s, id, permits, now + lease)
    save(key, r, s, now, server_now, reset)
  elseif s.dirty then
    save(key, r, s, now, server_now, reset)
  end
  return granted, bound, remaining, retry, reset, least
end

function operations(OPERATIONS, decision)
  function OPERATIONS.peek(key, r, now, server_now, split, permits, _, limit, lease)
    local s = load(key, r, now, split)
    local granted, bound, remaining, retry, reset, least = combined(r, s, now, tonumber(permits), limit, lease)
    if s.block > now then
      local wait = math.ceil(s.block - now)
      return decision(false, 0, math.max(wait, retry), math.max(wait, reset), bound, math.max(wait, least))
    end
    return decision(granted, remaining, retry, reset, bound, least)
  end
  function OPERATIONS.reserve(key, r, now, server_now, split, permits, id, limit, lease)
    local granted, bound, remaining, retry, reset, least = take(key, r, now, tonumber(permits), server_now, split, tonumber(id), limit, lease)
    return decision(granted, remaining, retry, reset, bound, least)
  end
${rate ? settleOf(refundBody) : ''}  -- A settle past what was reserved: its lease released, the excess charged to the rate alone.
  function OPERATIONS.charge(key, r, now, server_now, split, permits, id, limit, lease)
    local s = load(key, r, now, split)
    id = tonumber(id)
    release(s, id)${
      rate
        ? `
    settle(r, s, now, 0, id)
    ${codec.folds ? 'fold(r, s, now)' : ''}
    local v = { charge(r, now, tonumber(permits), unpack(s.body)) }
    s.body = { unpack(v, 4, ${3 + codec.body.length}) }
    if v[3] then s.rc = {} end`
        : ''
    }
    local _, bound, remaining, _, reset = combined(r, s, now, 0, limit, lease)
    save(key, r, s, now, server_now, reset)
    return decision(true, remaining, 0, reset, bound)
  end
  -- A settle at or below what was reserved: its lease released, the rest refunded to the rate;
  -- under the key's own rule (see dispatch).
  function OPERATIONS.refund(key, r, now, server_now, split, permits, id, limit, lease)
    local s = load(key, r, now, split, nil, true)
    r = s.r or r
    id = tonumber(id)
    local held = release(s, id)${rate ? `\n    if settle(r, s, now, tonumber(permits), id) then held = true end` : ''}
    local _, bound, remaining, _, reset = combined(r, s, now, 0, limit, lease)
    if held or s.dirty then save(key, r, s, now, server_now, reset) end
    return decision(true, remaining, 0, reset, bound), s.r
  end
  function OPERATIONS.block(key, r, now, server_now, split, duration, _, limit, lease)
    local s = load(key, r, now, split)
    local ends = now + tonumber(duration)
    if s.block >= ends and not s.dirty then return 'OK' end
    s.block = math.max(s.block, ends)
    save(key, r, s, now, server_now, select(5, combined(r, s, now, 0, limit, lease)))
    return 'OK'
  end
${RESET}  -- Holds lease id until now + ms if it is still held ('OK'), else changes nothing ('NO'); under
  -- the key's own rule (see dispatch).
  function OPERATIONS.extend(key, r, now, server_now, split, duration, id, limit, lease)
    local s = load(key, r, now, split, nil, true)
    r = s.r or r
    id = tonumber(id)
    for k = 1, #s.ls, 3 do
      if s.ls[k] == id then
        local permits = s.ls[k + 1]
        release(s, id)
        place(s, id, permits, now + tonumber(duration))
        save(key, r, s, now, server_now, select(5, combined(r, s, now, 0, limit, lease)))
        return 'OK'
      end
    end
    return 'NO'
  end
end
`;
}

/** A leased script's dispatch: operations alone (a limiter with leases sends no `tryAcquire`), each decision ending with its limit. */
export function leaseDispatch(hot: string): string {
  return `
local time = redis.call('TIME')
local server_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
${operation(hot, true)}
`;
}

/**
 * Runs the operation ARGV[1] names on KEYS[1] and returns its reply (see dispatch); with leases,
 * each decision ends with its limit, a refusal then with the wait its rate and block prove (no
 * release can end it sooner), and the operation also takes the in-flight limit and lease length
 * (ARGV[8], ARGV[9]). Indented as the plain dispatch's branch, flush for the leased one.
 */
function operation(hot: string, leases: boolean): string {
  const limit = leases ? ', limit' : '';
  const field = leases ? ' %d' : '';
  const lines = [
    'local OPERATIONS = {}',
    `local function decision(granted, remaining, retry, reset${limit}${leases ? ', least' : ''})`,
    `  if granted then return string.format('A %d %d${field}', remaining, reset${limit}) end`,
    `  return string.format('R %d %d %d${field}${field}', remaining, retry, reset${limit}${leases ? ', least' : ''})`,
    'end',
    `take, operations = rare(${hot})`,
    'operations(OPERATIONS, decision)',
    'local operation = OPERATIONS[ARGV[1]]',
    "if not operation then return 'E unknown operation ' .. ARGV[1] end",
    'local now = server_now',
    "if ARGV[2] ~= '' then now = tonumber(ARGV[2]) end",
    'local split, at = tonumber(ARGV[3]), 6',
    "-- A cluster's second try (split -2): what the engine read of the previous key, then the arguments.",
    `if split == ${GIVEN_SPLIT} then split, at = { ARGV[6], tonumber(ARGV[7]) }, 8 end`,
    `local ok, reply, own = pcall(operation, KEYS[1], prepare(tonumber(ARGV[4]), tonumber(ARGV[5])), now, server_now, split, ARGV[at], ARGV[at + 1]${leases ? ', tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])' : ''})`,
    'if not ok then',
    `  if reply == '${ABSENT}' then return reply end`,
    "  return 'E ' .. tostring(type(reply) == 'table' and reply.err or reply)",
    'end',
    "if own then return string.format('S%d/%d ', own.limit, own.window) .. reply end",
    'return reply',
  ];
  return lines.map((line) => (leases ? line : `  ${line}`)).join('\n');
}
