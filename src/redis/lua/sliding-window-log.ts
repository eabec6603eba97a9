/**
 * The sliding window log of src/algorithms/sliding-window-log.ts, as a `decide` for
 * {@link batchScript}. A key is a sorted set with one member per granted permit, scored by its
 * time. Members are a sequence number padded to 16 digits, so they are unique and, within one
 * time, sort in the order granted; the newest member carries the sequence on (10^16 permits in one
 * key's busy life). Expired members are trimmed whenever a request is granted, so the set never
 * holds more than `limit` of them afterwards. ARGV[1..2]: limit, windowMs.
 */
export const SLIDING_WINDOW_LOG = `
local limit, window_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

-- Scores cross into Redis as text: '%.17g' gives back the same double.
local function exact(x)
  return string.format('%.17g', x)
end

local function decide(key, now, permits)
  local newest, sequence = -math.huge, 0
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[1] then sequence, newest = tonumber(last[1]), tonumber(last[2]) end
  -- A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
  if now < newest then now = newest end
  local expired = redis.call('ZCOUNT', key, '-inf', exact(now - window_ms))
  local live = redis.call('ZCARD', key) - expired
  if live + permits > limit then
    -- The request fits once the (live + permits - limit)-th live hit has left.
    local rank = expired + live + permits - limit - 1
    local leaving = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
    return limit - live, math.ceil(leaving + window_ms - now), math.ceil(newest + window_ms - now)
  end
  if expired > 0 then redis.call('ZREMRANGEBYRANK', key, 0, expired - 1) end
  -- unpack() is bounded by the Lua stack, so a large request is added in slices.
  local at, members = exact(now), {}
  for i = 1, permits do
    members[#members + 1] = at
    members[#members + 1] = string.format('%016d', sequence + i)
    if #members == 1000 or i == permits then
      redis.call('ZADD', key, unpack(members))
      members = {}
    end
  end
  -- The newest hit, now, leaves at now + windowMs: from then on the key is as new.
  local reset = math.ceil(window_ms)
  redis.call('PEXPIRE', key, ms(reset))
  return limit - live - permits, 0, reset
end
`;
