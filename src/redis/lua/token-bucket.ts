import { CEIL_DIV, FLOOR_DIV } from './prelude';

/**
 * The token bucket (and the leaky bucket, which decides identically) of
 * src/algorithms/token-bucket.ts, as a `decide` for {@link batchScript}. A key holds two packed
 * doubles: the scaled tokens left and the time they were counted at. ARGV[1..3]: units added per
 * ms, units per token, capacity in units.
 *
 * Measured inside Redis 7.0 (batches of 32 over 10 000 keys): a granted decision costs ~3.0 µs, of
 * which the `SET ... PX` is ~1.5 µs and the `GET` ~0.8 µs. Writing with `KEEPTTL` and setting the
 * expiry again only when a horizon kept in the value runs short measured 2.35-2.6 µs; not taken,
 * as keys would then outlive their reset by up to the horizon's slack, and it needs Redis 6.
 */
export const TOKEN_BUCKET = `${FLOOR_DIV}${CEIL_DIV}
local per_ms, per_token, capacity = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local function decide(key, now, permits)
  -- A missing key is a full bucket: the key expires only once the bucket has refilled.
  local units, last = capacity, now
  local state = redis.call('GET', key)
  if state then units, last = struct.unpack('<dd', state) end
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
  redis.call('SET', key, struct.pack('<dd', left, now), 'PX', ms(reset))
  return floor_div(left, per_token), 0, reset
end
`;
