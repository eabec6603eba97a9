/**
 * The sliding window log of src/algorithms/sliding-window-log.ts, as a `decide` for
 * {@link batchScript}. A key is a sorted set with one member per grant, whatever its size, scored
 * by its time (grants at one time share a member: they leave together). A member is the running total of permits through that grant, padded to 16 digits
 * (so that grants of one time sort in the order granted), then ':' and the grant's permits: the
 * permits of any stretch of the log are one subtraction, and a script's work and the set's size are
 * bounded by grants, never by permits. Expired grants are trimmed whenever a request is granted,
 * so the set never holds more than `limit` of them afterwards. ARGV[1..2]: limit, windowMs.
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

local function total_at(key, rank)
  return (grant(redis.call('ZRANGE', key, rank, rank)[1]))
end

local function decide(key, now, permits)
  local newest, total, newest_size = -math.huge, 0, 0
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[1] then
    total, newest_size = grant(last[1])
    newest = tonumber(last[2])
  end
  -- A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
  if now < newest then now = newest end
  local cutoff = exact(now - window_ms)
  -- The running total before the oldest live grant: every permit after it is live. Usually the
  -- oldest grant of all is still live, and one look at it tells.
  local base, expired = total, false
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if oldest[1] and tonumber(oldest[2]) <= now - window_ms then
    expired = true
    oldest = redis.call('ZRANGEBYSCORE', key, '(' .. cutoff, '+inf', 'LIMIT', 0, 1)
  end
  if oldest[1] then
    local through, size = grant(oldest[1])
    base = through - size
  end
  local live = total - base
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
    return false, limit - live, retry, math.max(retry, math.ceil(newest + window_ms - now))
  end
  if live == 0 then
    -- Every grant has left: start the totals over.
    if total > 0 then redis.call('DEL', key) end
    total = 0
  else
    if expired then redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff) end
    -- Totals stay below 2^53 so that every sum and difference is exact: counted again from the
    -- oldest live grant, they are at most the limit.
    if total > 9007199254740991 - permits then
      local members = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
      redis.call('DEL', key)
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
    redis.call('ZADD', key, exact(now), string.format('%016d:%d', total + permits, newest_size + permits))
  else
    redis.call('ZADD', key, exact(now), string.format('%016d:%d', total + permits, permits))
  end
  -- The newest hit, now, leaves at now + windowMs: from then on the key is as new.
  local reset = math.ceil(window_ms)
  redis.call('PEXPIRE', key, ms(reset))
  return true, limit - live - permits, 0, reset
end
`;
