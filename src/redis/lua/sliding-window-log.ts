import { blockedAnswer } from './prelude';

/**
 * Lua reading the log as seen at `now` (moved up to its newest grant: a reading earlier counts as no
 * time passing, which keeps the log in order) into locals: its running `total`, the `newest` grant
 * and its permits (`newest_size`), `cutoff` (the text of now - windowMs), the total before the
 * oldest live grant (`base`), whether any grant has `expired`, the `live` permits, and the `meta`
 * member (nil without one) with its `block` end and `stamp`. Inline in decide and in charge, so a
 * decision calls no function for it.
 */
const SCAN = `local newest, total, newest_size = -math.huge, 0, 0
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[1] and last[2] ~= '-inf' then
    total, newest_size = grant(last[1])
    newest = tonumber(last[2])
  end
  if now < newest then now = newest end
  local cutoff = exact(now - window_ms)
  -- The running total before the oldest live grant: every permit after it is live. Usually the
  -- oldest grant of all is still live, and one look at it tells.
  local base, expired, meta, block, stamp = total, false, nil, nil, 0
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if oldest[2] == '-inf' then
    meta = oldest[1]
    block, stamp = meta_of(meta)
  end
  if oldest[1] and tonumber(oldest[2]) <= now - window_ms then
    expired = true
    oldest = redis.call('ZRANGEBYSCORE', key, '(' .. cutoff, '+inf', 'LIMIT', 0, 1)
  end
  if oldest[1] then
    local through, size = grant(oldest[1])
    base = through - size
  end
  local live = total - base`;

/** Lua logging `permits` at `now` after {@link SCAN}, trimming what has expired: the one place that writes grants. */
function logGrant(permits: string): string {
  return `if live == 0 then
    -- Every grant has left: start the totals over.
    if meta then redis.call('ZREMRANGEBYSCORE', key, '(-inf', '+inf') elseif total > 0 then redis.call('DEL', key) end
    total = 0
  else
    if expired then redis.call('ZREMRANGEBYSCORE', key, '(-inf', cutoff) end
    -- Totals stay below 2^53 so that every sum and difference is exact: counted again from the
    -- oldest live grant, they are at most the limit (twice it in debt).
    if total > 9007199254740991 - ${permits} then
      local members = redis.call('ZRANGEBYSCORE', key, '(-inf', '+inf', 'WITHSCORES')
      redis.call('ZREMRANGEBYSCORE', key, '(-inf', '+inf')
      for i = 1, #members, 2 do
        local through, size = grant(members[i])
        redis.call('ZADD', key, members[i + 1], string.format('%016d:%d', through - base, size))
      end
      total = total - base
    end
  end
  if live > 0 and newest == now then
    -- Grants at one time leave together: the newest member, of this very time, takes these permits.
    redis.call('ZREM', key, string.format('%016d:%d', total, newest_size))
    redis.call('ZADD', key, exact(now), string.format('%016d:%d', total + ${permits}, newest_size + ${permits}))
  else
    redis.call('ZADD', key, exact(now), string.format('%016d:%d', total + ${permits}, ${permits}))
  end`;
}

/**
 * The sliding window log of src/algorithms/sliding-window-log.ts, as a `decide` and the
 * `OPERATIONS` for {@link batchScript}. A key is a sorted set with one member per grant, whatever
 * its size, scored by its time (grants at one time share a member: they leave together). A member
 * is the running total of permits through that grant, padded to 16 digits (so that grants of one
 * time sort in the order granted), then ':' and the grant's permits: the permits of any stretch of
 * the log are one subtraction, and a script's work and the set's size are bounded by grants, never
 * by permits. Expired grants are trimmed whenever a request is granted, so the set never holds more
 * than `limit` of them afterwards (twice that in debt). ARGV[1..2]: limit, windowMs.
 *
 * Once blocked or reserved, the set also holds one member scored -inf, `meta:<block end>:<stamp>`
 * (-inf for no block, 0 for no stamp), before every grant: ranks and counts by score stay those of
 * the grants after it, and trimming by score never reaches it. A reservation's receipt is its
 * grant's time, and a refund takes permits off the member of that time while it is in the window.
 */
export const SLIDING_WINDOW_LOG = `
local limit, window_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

-- Scores cross into Redis as text: '%.17g' gives back the same double.
local function exact(x)
  return string.format('%.17g', x)
end

-- A member's running total and permits; anything else under the key is not a log of ours.
local function grant(member)
  local total, permits = string.match(member, '^(%d+):(%d+)$')
  if not total then error('ratekeeper: not a sliding-window-log key') end
  return tonumber(total), tonumber(permits)
end

-- The block end and stamp of the member scored -inf.
local function meta_of(member)
  local block, stamp = string.match(member, '^meta:([^:]+):([^:]+)$')
  if not block then error('ratekeeper: not a sliding-window-log key') end
  return tonumber(block), tonumber(stamp)
end

local function total_at(key, rank)
  return (grant(redis.call('ZRANGE', key, rank, rank)[1]))
end

-- mode: see blockedAnswer in prelude.ts. Beyond the decision, a grant returns its time and the stamp of the key's receipts.
local function decide(key, now, permits, server_now, mode)
  ${SCAN}
  local shut = block and block > now and mode ~= 'own' and mode ~= 'charge'
  if live + permits > limit then
    -- The request fits once the grant holding the (live + permits - limit)-th live permit has left:
    -- the first live grant whose running total reaches it, found by rank.
    local wanted = total - limit + permits
    local low = redis.call('ZCOUNT', key, '-inf', cutoff)
    local high = redis.call('ZCARD', key) - 1
    while low < high do
      local mid = math.floor((low + high) / 2)
      if total_at(key, mid) >= wanted then high = mid else low = mid + 1 end
    end
    local leaving = tonumber(redis.call('ZRANGE', key, low, low, 'WITHSCORES')[2])
    -- Still in the window now, so the wait is at least 1 ms even when its time + windowMs rounds down.
    local retry = math.max(1, math.ceil(leaving + window_ms - now))
    local reset = math.max(retry, math.ceil(newest + window_ms - now))
    -- In debt even 0 permits do not fit; for the state now (peek 0), simply none left.
    if permits == 0 then retry = 0 end
    if shut then ${blockedAnswer('now', 'retry', 'reset')} end
    if permits == 0 then return true, 0, 0, reset end
    return false, math.max(0, limit - live), retry, reset
  end
  -- The newest hit, now, leaves at now + windowMs: from then on the key is as new.
  local reset = math.ceil(window_ms)
  if permits == 0 then
    reset = 0
    if live > 0 then reset = math.max(1, math.ceil(newest + window_ms - now)) end
  end
  if shut then ${blockedAnswer('now', '0', 'reset')} end
  if mode and mode ~= 'reserve' and mode ~= 'charge' then return true, limit - live - permits, 0, reset end
  ${logGrant('permits')}
  if block then
    -- A charge may spend while blocked: the expiry still covers the block.
    redis.call('PEXPIRE', key, ms(math.max(reset, math.ceil(block - now))))
  else
    redis.call('PEXPIRE', key, ms(reset))
  end
  return true, limit - live - permits, 0, reset, now, 0, 0, stamp
end
`;

/** The operations on one key (see batchScript), defined only when a call names one. */
export const SLIDING_WINDOW_LOG_OPERATIONS = `
-- Writes the member scored -inf, in place of the one there was.
local function set_meta(key, member, block, stamp)
  if member then redis.call('ZREM', key, member) end
  redis.call('ZADD', key, '-inf', 'meta:' .. exact(block) .. ':' .. exact(stamp))
end


local function stamped(key, stamp)
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local block, member = -math.huge, nil
  if oldest[2] == '-inf' then
    member = oldest[1]
    block = meta_of(member)
  end
  set_meta(key, member, block, stamp)
  return stamp
end

-- Never refused: logged as one grant now, up to twice the limit live (and below 2^53); past that
-- the oldest permits are forgiven (they would have left first, so spending more never leaves a key
-- better off), which voids the receipts issued before.
function OPERATIONS.charge(key, now, server_now, permits)
  permits = tonumber(permits)
  ${SCAN}
  local bound = math.min(2 * limit, 9007199254740991)
  if live + permits > bound and stamp ~= 0 then set_meta(key, meta, block, 0) end
  local logged = math.min(permits, bound)
  local kept = math.min(live, bound - logged)
  if kept < live then
    -- The running total through the last permit forgiven: the grants up to it go, the one holding it
    -- keeps what follows. Read a few at a time from the oldest: the work is the grants forgiven.
    local cut = base + live - kept
    local reached = false
    while not reached do
      local members = redis.call('ZRANGEBYSCORE', key, '(' .. cutoff, '+inf', 'WITHSCORES', 'LIMIT', 0, 32)
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
    live, base = kept, cut
  end
  ${logGrant('logged')}
  newest = now
  local reset = math.max(1, math.ceil(newest + window_ms - now))
  redis.call('PEXPIRE', key, ms(expiry(key, reset, block, now)))
  return decision(true, math.max(0, limit - live - logged), 0, reset)
end

-- Takes up to permits off the grant logged at the receipt's time, while it is in the window: that
-- member and every later one count that many fewer, and a member left with none goes. Answers the
-- state now, the block aside, as a settle does.
function OPERATIONS.refund(key, now, server_now, permits, at, _, _, receipt)
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local stamp = 0
  if oldest[2] == '-inf' then
    local _
    _, stamp = meta_of(oldest[1])
  end
  at = tonumber(at)
  if stamp ~= 0 and stamp == tonumber(receipt) then
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local read_at = now
    if newest[2] ~= '-inf' and tonumber(newest[2]) > read_at then read_at = tonumber(newest[2]) end
    local members = redis.call('ZRANGEBYSCORE', key, exact(at), '+inf', 'WITHSCORES')
    if at + window_ms > read_at and members[1] and tonumber(members[2]) == at then
      local _, held = grant(members[1])
      local removed = math.min(tonumber(permits), held)
      for i = 1, #members, 2 do
        local through, size = grant(members[i])
        if i == 1 then size = size - removed end
        redis.call('ZREM', key, members[i])
        if size > 0 then redis.call('ZADD', key, members[i + 1], string.format('%016d:%d', through - removed, size)) end
      end
    end
  end
  return decision(decide(key, now, 0, server_now, 'own'))
end

function OPERATIONS.block(key, now, server_now, duration)
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local block, stamp, member = -math.huge, 0, nil
  if oldest[2] == '-inf' then
    member = oldest[1]
    block, stamp = meta_of(member)
  elseif oldest[1] then
    grant(oldest[1])
  end
  local ends = now + tonumber(duration)
  if block >= ends then return 'OK' end
  local ttl = expiry(key, 0, ends, now)
  set_meta(key, member, ends, stamp)
  redis.call('PEXPIRE', key, ms(ttl))
  return 'OK'
end
`;
