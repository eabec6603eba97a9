import { CEIL_DIV, FLOOR_DIV, MUL_DIV } from './prelude';

/**
 * The token bucket (and the leaky bucket, which decides identically) of
 * src/algorithms/token-bucket.ts, as a `decide` for {@link batchScript}. A key holds three packed
 * doubles: the scaled tokens left, the time they were counted at, and the server time (less 1 ms)
 * its expiry was last set to. ARGV[1..3]: units added per ms, units per token, the limit.
 *
 * A rule whose capacity (`limit × units per token`) passes 2^53 is decided by `decide_wide`, as the
 * in-memory bucket's wide plan is: its key holds four doubles, whole tokens left, the units toward
 * the next token, the time and the expiry time.
 *
 * A key must live until its bucket is full again, and that moment moves later with every grant;
 * setting the expiry (`SET ... PX`) was half of a decision's cost inside Redis (~1.5 of 3.0 µs,
 * batches of 32 over 10 000 keys). So a key is given `slack` more than it needs, a quarter window
 * and at most a minute, and its expiry is set again only when less than half of that is left:
 * until then a grant overwrites the first 16 bytes in place (`SETRANGE`), ~2.3 µs a decision. An
 * idle key outlives its full bucket by at most `slack`. Expiries are on the server's clock.
 */
export const TOKEN_BUCKET = `${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local per_ms, per_token, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local capacity = limit * per_token
local window_ms = per_token * (limit / per_ms)
local slack = math.floor(math.min(window_ms / 4, 60000))

-- Whole tokens and units toward the next after elapsed ms of refill, capped at a full bucket.
local function refill_wide(tokens, partial, elapsed)
  if tokens == limit or elapsed >= window_ms then return limit, 0 end
  local more, rest = mul_div_mod(elapsed, per_ms, partial, per_token)
  if tokens + more >= limit then return limit, 0 end
  return tokens + more, rest
end

-- Whole ms until tokens (with partial units toward the next) reach wanted.
local function until_tokens(wanted, tokens, partial)
  if tokens >= wanted then return 0 end
  local q, r = mul_div_mod(wanted - tokens - 1, per_token, per_token - partial, per_ms)
  if r > 0 then return q + 1 end
  return q
end

local function decide_wide(key, now, permits, server_now)
  local tokens, partial, last, expires = limit, 0, now, 0
  local state = redis.call('GET', key)
  if state then tokens, partial, last, expires = unpacked(state, '<dddd', 32) end
  if now < last then now = last end
  tokens, partial = refill_wide(tokens, partial, now - last)
  if tokens < permits then
    return false, tokens, until_tokens(permits, tokens, partial), until_tokens(limit, tokens, partial)
  end
  local left = tokens - permits
  local reset = until_tokens(limit, left, partial)
  if server_now + reset + slack / 2 <= expires then
    redis.call('SETRANGE', key, 0, struct.pack('<ddd', left, partial, now))
  else
    redis.call('SET', key, struct.pack('<dddd', left, partial, now, server_now + reset + slack - 1), 'PX', ms(reset + slack))
  end
  return true, left, 0, reset
end

local function decide(key, now, permits, server_now)
  if capacity > 9007199254740991 then return decide_wide(key, now, permits, server_now) end
  -- A missing key is a full bucket: the key expires only once the bucket has refilled.
  local units, last, expires = capacity, now, 0
  local state = redis.call('GET', key)
  if state then units, last, expires = unpacked(state, '<ddd', 24) end
  -- A reading earlier than the last one counts as no time passing.
  if now < last then now = last end
  local refilled = units + (now - last) * per_ms
  if refilled < capacity then units = refilled else units = capacity end
  local cost = permits * per_token
  if units < cost then
    return false, floor_div(units, per_token), ceil_div(cost - units, per_ms), ceil_div(capacity - units, per_ms)
  end
  local left = units - cost
  local reset = ceil_div(capacity - left, per_ms)
  if server_now + reset + slack / 2 <= expires then
    redis.call('SETRANGE', key, 0, struct.pack('<dd', left, now))
  else
    -- Recorded 1 ms short: Redis may count the expiry from a millisecond before server_now.
    redis.call('SET', key, struct.pack('<ddd', left, now, server_now + reset + slack - 1), 'PX', ms(reset + slack))
  end
  return true, floor_div(left, per_token), 0, reset
end
`;
