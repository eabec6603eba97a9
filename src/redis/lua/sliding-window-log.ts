import { ABSENT, CLUSTER_SPLIT } from '../protocol';
import { dispatch, leaseDispatch, leasePieces, topLevelLocals } from './shell';
import { LEGACY_KEY, PRELUDE } from './prelude';

/**
 * The sliding window log of src/algorithms/sliding-window-log.ts. Its pure part decides from what
 * the log holds at a reading (the live permits, the newest grant, and when the grant that must
 * leave for a request to fit leaves); the rest is the log's own shell, since its store is a sorted
 * set, not a string: one member per grant, whatever its size, scored by its time (grants at one
 * time share a member: they leave together). A member is the running total of permits through that
 * grant, padded to 16 digits (so that grants of one time sort in the order granted), then ':' and
 * the grant's permits: the permits of any stretch of the log are one subtraction, and a script's
 * work and the set's size are bounded by grants, never by permits. Expired grants are trimmed
 * whenever a request is granted.
 *
 * The first member, scored -inf, is the rule the log counts under, `r<limit>/<windowMs>`, followed
 * once blocked or reserved by `|<block end>` and `|<id>,<grant time>` per outstanding receipt,
 * oldest first: ranks and counts by score stay those of the grants after it, and trimming by score
 * never reaches it. Carry-over and adoption of the previous version's log are as in the string
 * shell (src/redis/lua/shell.ts). With an in-flight limit the member also holds the leases (see
 * LEASES_WRITE), so they are written atomically with the grants, in the log's own key.
 */
const CODEC = `
-- Library functions a decision calls, as locals (see PRELUDE).
local match, max, tonumber = string.match, math.max, tonumber

local function prepare(limit, window)
  return { limit = limit, window = window, bound = math.min((1 + DEBT) * limit, MAX_SAFE), tag = format('r%d/%d', limit, window), slack = math.min(math.floor(window / 4), SLACK_CAP) }
end

-- A request the live permits leave no room for: it fits once the grant holding the permit that must
-- leave has left, at leaving + windowMs (at least 1 ms away: it is still in the window now). In
-- debt even 0 permits do not fit; for the state now (peek 0), simply none left.
local function refusal(r, now, permits, live, leaving, newest)
  local retry = max(1, ceil(leaving + r.window - now))
  local reset = max(retry, ceil(newest + r.window - now))
  if permits == 0 then return true, 0, 0, reset end
  return false, max(0, r.limit - live), retry, reset
end

-- A request that fits: the newest grant, now, leaves at now + windowMs; from then on the key is as new.
local function allowance(r, now, permits, live, newest)
  if permits > 0 then return true, r.limit - live - permits, 0, ceil(r.window) end
  if live > 0 then return true, r.limit - live, 0, max(1, ceil(newest + r.window - now)) end
  return true, r.limit, 0, 0
end
`;

/**
 * The log as seen at `now` (moved up to its newest grant: a reading earlier counts as no time
 * passing, which keeps the log in order): its meta member (nil without one), the reading, the
 * newest grant's time and permits, the running total, the total before the oldest live grant,
 * `cutoff` (the text of now - windowMs) and whether any grant has expired. Usually the oldest grant
 * of all is still live, and one look at it tells.
 */
const VIEW = `
-- Scores cross into Redis as text: '%.17g' gives back the same double.
local function exact(x)
  return format('%.17g', x)
end

local function not_ours()
  error('ratekeeper: not a sliding-window-log key')
end

-- A member's running total and permits.
local function grant(member)
  local total, permits = match(member, '^(%d+):(%d+)$')
  if not total then not_ours() end
  return tonumber(total), tonumber(permits)
end

local function view(key, window, now)
  local newest, total, newest_size = -math.huge, 0, 0
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  -- No member: the key is absent (Redis keeps no empty sorted set), and there is no head to read.
  if not last[1] then return nil, now, newest, 0, 0, 0, false end
  if last[2] ~= '-inf' then
    total, newest_size = grant(last[1])
    newest = tonumber(last[2])
  end
  if now < newest then now = newest end
  local head = call('ZRANGE', key, 0, 1, 'WITHSCORES')
  local meta, oldest, oldest_at = nil, head[1], head[2]
  if head[2] == '-inf' then meta, oldest, oldest_at = head[1], head[3], head[4] end
  local base, expired = total, false
  if oldest and tonumber(oldest_at) <= now - window then
    expired = true
    oldest = call('ZRANGEBYSCORE', key, '(' .. exact(now - window), '+inf', 'LIMIT', 0, 1)[1]
  end
  if oldest then
    local through, size = grant(oldest)
    base = through - size
  end
  return meta, now, newest, newest_size, total, base, expired
end

-- When the first live grant whose running total reaches wanted was logged, found by rank.
local function leaving(key, wanted, now, window)
  local low = call('ZCOUNT', key, '-inf', exact(now - window))
  local high = call('ZCARD', key) - 1
  while low < high do
    local mid = floor((low + high) / 2)
    if grant(call('ZRANGE', key, mid, mid)[1]) >= wanted then high = mid else low = mid + 1 end
  end
  return tonumber(call('ZRANGE', key, low, low, 'WITHSCORES')[2])
end

-- Logs permits at now after view, trimming what has expired: the one place that writes grants.
local function log_grant(key, window, permits, now, newest, newest_size, total, base, expired)
  local live = total - base
  if live == 0 then
    -- Every grant has left: start the totals over.
    if total > 0 then call('ZREMRANGEBYSCORE', key, '(-inf', '+inf') end
    total = 0
  else
    if expired then call('ZREMRANGEBYSCORE', key, '(-inf', exact(now - window)) end
    -- Totals stay below 2^53 so that every sum and difference is exact: counted again from the
    -- oldest live grant, they are at most the debt bound.
    if total > MAX_SAFE - permits then
      local members = call('ZRANGEBYSCORE', key, '(-inf', '+inf', 'WITHSCORES')
      call('ZREMRANGEBYSCORE', key, '(-inf', '+inf')
      for i = 1, #members, 2 do
        local through, size = grant(members[i])
        call('ZADD', key, members[i + 1], format('%016d:%d', through - base, size))
      end
      total = total - base
    end
  end
  if live > 0 and newest == now then
    -- Grants at one time leave together: the newest member, of this very time, takes these permits.
    call('ZREM', key, format('%016d:%d', total, newest_size))
    call('ZADD', key, exact(now), format('%016d:%d', total + permits, newest_size + permits))
  else
    call('ZADD', key, exact(now), format('%016d:%d', total + permits, permits))
  end
end

`;

/** The names rare takes (see dispatch in the string shell). */
const HOT = topLevelLocals(PRELUDE + LEGACY_KEY + CODEC + VIEW);

/** The plain log's decision (see dispatch in the string shell): a leased script has none. */
const DECIDE_KEY = `
-- A decision: a log under the call's rule, neither blocked nor reserved, is decided here; any
-- other answers nil, for take. A key not yet stored is created here unless the previous version's may exist.
local function decide_key(key, r, now, permits, server_now, split)
  local meta, at, newest, newest_size, total, base, expired = view(key, r.window, now)
  if meta ~= r.tag and (meta or total > 0 or split == ${CLUSTER_SPLIT} or (split > 0 and call('EXISTS', legacy_key(key, r, split)) == 1)) then
    return nil
  end
  local live = total - base
  if live + permits > r.limit then return refusal(r, at, permits, live, leaving(key, total - r.limit + permits, at, r.window), newest) end
  local ok, remaining, retry, reset = allowance(r, at, permits, live, newest)
  if meta then
    log_grant(key, r.window, permits, at, newest, newest_size, total, base, expired)
  else
    -- A log not yet stored: its rule's member and the grant (as log_grant writes it) in one command.
    call('ZADD', key, '-inf', r.tag, exact(at), format('%016d:%d', permits, permits))
  end
  call('PEXPIRE', key, ms(reset + r.slack))
  return ok, remaining, retry, reset
end
`;

/** A leased log's meta member: the tag's 'r' made 'l' (a plain script refuses it), then '|L<id>,<permits>,<end>' per lease, in end order. */
const LEASES_WRITE = `
  if #ls > 0 then
    parts[1] = 'l' .. string.sub(r.tag, 2)
    for k = 1, #ls, 3 do parts[#parts + 1] = 'L' .. exact(ls[k]) .. ',' .. exact(ls[k + 1]) .. ',' .. exact(ls[k + 2]) end
  end`;

/** Reads the leases of a meta member, keeping those not ended at now. */
const LEASES_READ = `
    for id, permits, ends in string.gmatch(list, '|L([^,|]+),([^,|]+),([^,|]+)') do
      id, permits, ends = tonumber(id), tonumber(permits), tonumber(ends)
      if not (id and permits and ends and id >= 1 and id % 1 == 0 and permits >= 1 and permits % 1 == 0 and ends == ends and ends < math.huge) then not_ours() end
      if ends > now then ls[#ls + 1], ls[#ls + 2], ls[#ls + 3] = id, permits, ends end
    end`;

/**
 * A leased log's own functions, beside the shell's lease pieces: `decide` is the log's part for
 * `combined`, over the key (its body is the key, and for a peek of a log under another rule what
 * carrying it over would hold: one grant of `carried` at `at`).
 */
const LEASED_PIECES = `
-- The key's expiry: ttl ms from now, and never before its latest lease ends.
function expire(key, now, ttl)
  if #ls > 0 then ttl = math.max(ttl, math.ceil(ls[#ls] - now)) end
  redis.call('PEXPIRE', key, ms(ttl))
end

function decide(r, t, permits, source, carried, at)
  if not carried then return evaluate(source, r, t, permits) end
  if at <= t - r.window then carried = 0 end
  if carried + permits > r.limit then return refusal(r, t, permits, carried, at, at) end
  return allowance(r, t, permits, carried, at)
end

-- A settle's answer: the key now (combined at 0 permits), the block aside.
function settled(key, r, now, limit, lease)
  local _, bound, remaining, _, reset = combined(r, { body = { key }, ls = ls }, now, 0, limit, lease)
  return true, remaining, 0, reset, bound
end
${leasePieces(true)}`;

/** Holds lease id until now + ms if it is still held ('OK'), else changes nothing ('NO'). */
const LEASED_EXTEND = `
  function OPERATIONS.extend(key, r, now, server_now, split, duration, id)
    local member, block, rc, _, _, _, _, own = load(key, r, now, split, true, true)
    r = own or r
    local s = { ls = ls }
    id = tonumber(id)
    for k = 1, #ls, 3 do
      if ls[k] == id then
        local permits = ls[k + 1]
        release(s, id)
        place(s, id, permits, now + tonumber(duration))
        set_meta(key, member, meta_text(r, block, rc))
        expire(key, now, redis.call('PTTL', key))
        return 'OK'
      end
    end
    return 'NO'
  end`;

/** Sets the key's expiry to ttl ms (a Lua expression): with leases, never before the latest lease ends. */
function pexpire(ttl: string, leases: boolean): string {
  return leases ? `expire(key, now, ${ttl})` : `redis.call('PEXPIRE', key, ms(${ttl}))`;
}

/**
 * The log's slow path and operations (rare), and its decision; with leases (an in-flight limit,
 * DESIGN-25 S3) the leased operations instead, and no decision of its own (see leased).
 */
function store(leases: boolean): string {
  return `
-- What only a call on a log that is not plain under its rule, or an operation, needs: take and
-- operations, and all they call, made on first need by rare (see dispatch in the string shell).
local function rare(${HOT})
local meta_text, meta_of, set_meta, load, evaluate, blocked, take, operations${leases ? ', ls, expire, decide, settled, place, release, inflight, combined, wait_from' : ''}
-- The meta member: the rule, then the block and the receipts when there are any.
function meta_text(r, block, rc)
  if block == -math.huge and #rc == 0${leases ? ' and #ls == 0' : ''} then return r.tag end
  local parts = { r.tag, exact(block) }
  for k = 1, #rc, 2 do parts[#parts + 1] = exact(rc[k]) .. ',' .. exact(rc[k + 1]) end${leases ? LEASES_WRITE : ''}
  return table.concat(parts, '|')
end

function meta_of(member${leases ? ', now' : ''})
  local limit, window, rest = string.match(member, '^${leases ? '[rl]' : 'r'}(%d+)/(%d+)(.*)$')
  if not limit then not_ours() end
  local block, rc = -math.huge, {}
  if rest ~= '' then
    local ends, list = string.match(rest, '^|([^|,]+)(.*)$')
    block = tonumber(ends)
    if not (block and block == block and block < math.huge) then not_ours() end
    for id, at in string.gmatch(list, '|([^,|${leases ? 'L' : ''}]+),([^,|]+)') do rc[#rc + 1], rc[#rc + 2] = tonumber(id), tonumber(at) end${leases ? LEASES_READ : ''}
  end
  limit, window = tonumber(limit), tonumber(window)
  if not (limit >= 1 and limit <= MAX_SAFE and window >= 1 and window <= MAX_WINDOW) then not_ours() end
  return limit, window, block, rc
end

function set_meta(key, old, member)
  if old == member then return end
  if old then redis.call('ZREM', key, old) end
  redis.call('ZADD', key, '-inf', member)
end

-- Brings the key under rule r and returns its meta member (nil for a key not yet stored), block
-- and receipts. A log counted under another rule is replaced by one grant now of what it counted
-- (up to r's debt bound), keeping its block; the previous version's log (for r) is renamed to the
-- key, its meta member ('meta:<block end>:<stamp>') replaced. With writes false (a peek) nothing is
-- written: a carried log answers with its count (the fifth value), an adopted one with its key (on a
-- cluster the key itself, holding the log given until the peek removes it: the sixth value).
-- split as in the string shell's load. With stays (a refund, an extension: they never change a
-- key's rule), a log counted under another rule is read under that rule, the eighth value, and not
-- carried over.
function load(key, r, now, split, writes, stays)${leases ? '\n  ls = {}' : ''}
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if not head[1] then
    if split == 0 then return nil, -math.huge, {}, key end
    local old_key, first
    if type(split) == 'table' then
      -- A cluster's second try: the previous log as the engine read it in its own slot, members and
      -- scores space-separated, and its PTTL (-2: no key, and so no members).
      first = {}
      for member, score in string.gmatch(split[1], '(%S+) (%S+)') do first[#first + 1], first[#first + 2] = member, score end
    elseif split == ${CLUSTER_SPLIT} then
      -- A cluster's first try: the previous log is in another slot, which the engine reads.
      error('${ABSENT}', 0)
    else
      old_key = legacy_key(key, r, split)
      first = redis.call('ZRANGE', old_key, 0, 0, 'WITHSCORES')
    end
    if not first[1] then return nil, -math.huge, {}, key end
    local block = -math.huge
    if first[2] == '-inf' then
      block = tonumber(string.match(first[1], '^meta:([^:]+):[^:]+$'))
      if not (block and block == block and block < math.huge) then not_ours() end
    else
      grant(first[1])
    end
    if old_key then
      if not writes then return nil, block, {}, old_key end
      redis.call('RENAME', old_key, key)
    else
      -- Written to the key as RENAME would (the engine deletes the previous log once adopted); a
      -- peek removes it again before it ends.
      for i = 1, #first, 2 do redis.call('ZADD', key, first[i + 1], first[i]) end
      if split[2] > 0 then redis.call('PEXPIRE', key, ms(split[2])) end
      if not writes then return nil, block, {}, key, nil, true end
    end
    -- The new meta member goes in before the previous one leaves: a log of nothing else would be
    -- deleted in between, and its expiry with it.
    local member = meta_text(r, block, {})
    redis.call('ZADD', key, '-inf', member)
    if first[2] == '-inf' then redis.call('ZREM', key, first[1]) end
    -- On a cluster the key expires no earlier than the previous one, whose delete may be lost.
    return member, block, {}, key, nil, nil, not old_key and split[2] or 0
  end
  if head[2] ~= '-inf' then not_ours() end
  local member = head[1]
  if member == r.tag then return member, -math.huge, {}, key end
  local limit, window, block, rc = meta_of(member${leases ? ', now' : ''})
  if limit == r.limit and window == r.window then return member, block, rc, key end
  if stays then return member, block, rc, key, nil, nil, nil, prepare(limit, window) end
  local _, _, _, _, total, base = view(key, window, now)
  local carried = math.min(total - base, r.bound)
  if not writes then return nil, block, {}, key, carried end
  redis.call('DEL', key)
  member = meta_text(r, block, {})
  redis.call('ZADD', key, '-inf', member)
  if carried > 0 then redis.call('ZADD', key, exact(now), string.format('%016d:%d', carried, carried)) end
  ${pexpire('math.max(math.ceil(r.window) + r.slack, math.ceil(block - now))', leases)}
  return member, block, {}, key
end

-- The decision at now on the log under key, and what writing a grant needs.
function evaluate(key, r, now, permits)
  local meta, at, newest, newest_size, total, base, expired = view(key, r.window, now)
  local live = total - base
  local ok, remaining, retry, reset
  if live + permits > r.limit then
    ok, remaining, retry, reset = refusal(r, at, permits, live, leaving(key, total - r.limit + permits, at, r.window), newest)
  else
    ok, remaining, retry, reset = allowance(r, at, permits, live, newest)
  end
  return ok, remaining, retry, reset, at, newest, newest_size, total, base, expired
end

function blocked(block, now, retry, reset${leases ? ', bound, least' : ''})
  local wait = math.ceil(block - now)
  return false, 0, math.max(wait, retry), math.max(wait, reset)${leases ? ', bound, math.max(wait, least)' : ''}
end
${leases ? LEASED_PIECES : ''}
-- tryAcquire (id nil) or reserve (id the caller's receipt id) on any key.
function take(key, r, now, permits, server_now, split, id${leases ? ', limit, lease' : ''})
  local member, block, rc, _, _, _, outlive = load(key, r, now, split, true)
  local ok, remaining, retry, reset, at, newest, newest_size, total, base, expired = evaluate(key, r, now, permits)${
    leases
      ? `
  local s, bound, least = { body = { key }, ls = ls }, nil, nil
  ok, bound, remaining, retry, reset, least = combined(r, s, now, permits, limit, lease)`
      : ''
  }
  if block > now then return blocked(block, now, retry, reset${leases ? ', bound, least' : ''}) end
  if not ok then return ok, remaining, retry, reset${leases ? ', bound, least' : ''} end
  log_grant(key, r.window, permits, at, newest, newest_size, total, base, expired)
  if id then
    rc[#rc + 1], rc[#rc + 2] = id, at
    -- Past the bound the oldest receipt is voided: its refund gives nothing.
    if #rc > 2 * MAX_RECEIPTS then table.remove(rc, 1) table.remove(rc, 1) end
  end${leases ? '\n  place(s, id, permits, now + lease)' : ''}
  set_meta(key, member, meta_text(r, block, rc))
  ${pexpire('math.max(reset + r.slack, math.ceil(block - now), outlive or 0)', leases)}
  return ok, remaining, retry, reset${leases ? ', bound' : ''}
end

function operations(OPERATIONS, decision)${
    leases
      ? ''
      : `
  -- A decision sent alone: a cluster's second try of a key it found absent.
  function OPERATIONS.decide(key, r, now, server_now, split, permits)
    return decision(take(key, r, now, tonumber(permits), server_now, split))
  end`
  }
  function OPERATIONS.peek(key, r, now, server_now, split, permits${leases ? ', _, limit, lease' : ''})
    permits = tonumber(permits)
    local _, block, _, source, carried, given = load(key, r, now, split, false)
    ${
      leases
        ? `local ok, bound, remaining, retry, reset, least = combined(r, { body = { source, carried, now }, ls = ls }, now, permits, limit, lease)`
        : `local ok, remaining, retry, reset
    if carried then
      -- What the carried log would hold: one grant, now.
      if carried + permits > r.limit then ok, remaining, retry, reset = refusal(r, now, permits, carried, now, now)
      else ok, remaining, retry, reset = allowance(r, now, permits, carried, now) end
    else
      ok, remaining, retry, reset = evaluate(source, r, now, permits)
    end`
    }
    if given then redis.call('DEL', key) end
    if block > now then return decision(blocked(block, now, retry, reset${leases ? ', bound, least' : ''})) end
    return decision(ok, remaining, retry, reset${leases ? ', bound, least' : ''})
  end
  function OPERATIONS.reserve(key, r, now, server_now, split, permits, id${leases ? ', limit, lease' : ''})
    return decision(take(key, r, now, tonumber(permits), server_now, split, tonumber(id)${leases ? ', limit, lease' : ''}))
  end
  -- Never refused: logged as one grant now, up to the debt bound live; past that the oldest permits
  -- are forgiven (they would have left first, so spending more never leaves a key better off),
  -- which voids the receipts.
  -- With an id, the charge settles that reservation above what it reserved: its receipt goes.
  function OPERATIONS.charge(key, r, now, server_now, split, permits, id${leases ? ', limit, lease' : ''})
    permits, id = tonumber(permits), tonumber(id)
    local member, block, rc, _, _, _, outlive = load(key, r, now, split, true)${leases ? '\n    release({ ls = ls }, id)' : ''}
    for k = #rc / 2, 1, -1 do if rc[2 * k - 1] == id then table.remove(rc, 2 * k - 1) table.remove(rc, 2 * k - 1) end end
    local meta, at, newest, newest_size, total, base, expired = view(key, r.window, now)
    local live = total - base
    if live + permits > r.bound then rc = {} end
    local logged = math.min(permits, r.bound)
    local kept = math.min(live, r.bound - logged)
    if kept < live then
      -- The running total through the last permit forgiven: the grants up to it go, the one holding it
      -- keeps what follows. Read a few at a time from the oldest: the work is the grants forgiven.
      local cut = base + live - kept
      local reached = false
      while not reached do
        local members = redis.call('ZRANGEBYSCORE', key, '(' .. exact(at - r.window), '+inf', 'WITHSCORES', 'LIMIT', 0, 32)
        if not members[1] then break end
        for i = 1, #members, 2 do
          local through = grant(members[i])
          redis.call('ZREM', key, members[i])
          if through > cut then
            redis.call('ZADD', key, members[i + 1], string.format('%016d:%d', through, through - cut))
            if through == total then newest_size = through - cut end
            reached = true
            break
          end
        end
      end
      base = cut
    end
    log_grant(key, r.window, logged, at, newest, newest_size, total, base, expired)
    set_meta(key, member, meta_text(r, block, rc))
    local reset = math.ceil(r.window)
    ${pexpire('math.max(reset + r.slack, math.ceil(block - now), outlive or 0)', leases)}
    return ${leases ? 'decision(settled(key, r, now, limit, lease))' : 'decision(true, math.max(0, r.limit - kept - logged), 0, reset)'}
  end
  -- Takes up to permits off the grant logged at the receipt's time, while it is in the window: that
  -- member and every later one count that many fewer, and a member left with none goes. Answers the
  -- state now, the block aside, as a settle does; under the key's own rule (see the string shell's dispatch).
  function OPERATIONS.refund(key, r, now, server_now, split, permits, id${leases ? ', limit, lease' : ''})
    local member, block, rc, _, _, _, _, own = load(key, r, now, split, true, true)
    r = own or r
    permits, id = tonumber(permits), tonumber(id)
    local i
    for k = 1, #rc / 2 do if rc[2 * k - 1] == id then i = k end end${
      leases
        ? `
    -- Its lease released; the meta member is written below when the receipt is still held.
    if release({ ls = ls }, id) and not i then set_meta(key, member, meta_text(r, block, rc)) end`
        : ''
    }
    if i then
      local at = rc[2 * i]
      table.remove(rc, 2 * i - 1) table.remove(rc, 2 * i - 1)
      set_meta(key, member, meta_text(r, block, rc))
      local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      local read_at = now
      if newest[2] ~= '-inf' and tonumber(newest[2]) > read_at then read_at = tonumber(newest[2]) end
      local members = redis.call('ZRANGEBYSCORE', key, exact(at), '+inf', 'WITHSCORES')
      if at + r.window > read_at and members[1] and tonumber(members[2]) == at then
        local _, held = grant(members[1])
        local removed = math.min(permits, held)
        for k = 1, #members, 2 do
          local through, size = grant(members[k])
          if k == 1 then size = size - removed end
          redis.call('ZREM', key, members[k])
          if size > 0 then redis.call('ZADD', key, members[k + 1], string.format('%016d:%d', through - removed, size)) end
        end
      end
    end
    return ${leases ? 'decision(settled(key, r, now, limit, lease))' : 'decision(evaluate(key, r, now, 0))'}, own
  end
  function OPERATIONS.block(key, r, now, server_now, split, duration)
    local member, block, rc = load(key, r, now, split, true)
    local ends = now + tonumber(duration)
    if block >= ends then return 'OK' end
    set_meta(key, member, meta_text(r, ends, rc))
    local ttl = math.max(math.ceil(ends - now), r.slack, 1)
    local kept = redis.call('PTTL', key)
    if kept > ttl then ttl = kept end
    ${pexpire('ttl', leases)}
    return 'OK'
  end
  function OPERATIONS.reset(key, r, now, server_now, split)
    redis.call('DEL', key)
    if split > 0 then redis.call('DEL', legacy_key(key, r, split)) end
    return 'OK'
  end${leases ? LEASED_EXTEND : ''}
end
return take, operations
end
local take, operations
${leases ? '' : DECIDE_KEY}`;
}

/** The sliding window log's script: its codec and store, and the shell's dispatch. */
export const SLIDING_WINDOW_LOG = `${PRELUDE}${LEGACY_KEY}${CODEC}${VIEW}${store(false)}${dispatch(HOT)}`;

/** The sliding window log's script with an in-flight limit (DESIGN-25 S3): made on first need, by leasePlan. */
export function leasedSlidingWindowLog(): string {
  return `${PRELUDE}${LEGACY_KEY}${CODEC}${VIEW}${store(true)}${leaseDispatch(HOT)}`;
}
