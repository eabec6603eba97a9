import { CEIL_DIV, FLOOR_DIV } from './prelude';

/**
 * The token bucket (and the leaky bucket, which decides identically) of
 * src/algorithms/token-bucket.ts, as a `decide` for {@link batchScript}. A key holds three packed
 * doubles: the scaled tokens left, the time they were counted at, and the server time (less 1 ms)
 * its expiry was last set to. ARGV[1..3]: units added per ms, units per token, capacity in units.
 *
 * A key must live until its bucket is full again, and that moment moves later with every grant;
 * setting the expiry (`SET ... PX`) was half of a decision's cost inside Redis (~1.5 of 3.0 µs,
 * batches of 32 over 10 000 keys). So a key is given `slack` more than it needs, a quarter window
 * and at most a minute, and its expiry is set again only when less than half of that is left:
 * until then a grant overwrites the first 16 bytes in place (`SETRANGE`), ~2.3 µs a decision. An
 * idle key outlives its full bucket by at most `slack`. Expiries are on the server's clock.
 */
export const TOKEN_BUCKET = `${FLOOR_DIV}${CEIL_DIV}
local per_ms, per_token, capacity = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local slack = math.floor(math.min(capacity / per_ms / 4, 60000))

local function decide(key, now, permits, server_now)
  -- A missing key is a full bucket: the key expires only once the bucket has refilled.
  local units, last, expires = capacity, now, 0
  local state = redis.call('GET', key)
  if state then units, last, expires = struct.unpack('<ddd', state) end
  -- A reading earlier than the last one counts as no time passing.
  if now < last then now = last end
  local refilled = units + (now - last) * per_ms
  if refilled < capacity then units = refilled else units = capacity end
  local cost = permits * per_token
  if units < cost then
    return floor_div(units, per_token), ceil_div(cost - units, per_ms), ceil_div(capacity - units, per_ms)
  end
  local left = units - cost
  local reset = ceil_div(capacity - left, per_ms)
  if server_now + reset + slack / 2 <= expires then
    redis.call('SETRANGE', key, 0, struct.pack('<dd', left, now))
  else
    -- Recorded 1 ms short: Redis may count the expiry from a millisecond before server_now.
    redis.call('SET', key, struct.pack('<ddd', left, now, server_now + reset + slack - 1), 'PX', ms(reset + slack))
  end
  return floor_div(left, per_token), 0, reset
end
`;
