import { FLOOR_DIV, PRELUDE } from './prelude';

/**
 * The fixed window of src/algorithms/fixed-window.ts. KEYS[1] holds two packed doubles: the index
 * of the window the count belongs to (window i covers [i·windowMs, (i+1)·windowMs)) and the permits
 * granted in it. ARGV[3..4]: limit, windowMs.
 * Replies {remaining, resetAfterMs} when allowed, {remaining, retryAfterMs, resetAfterMs} when refused.
 */
export const FIXED_WINDOW = `${PRELUDE}${FLOOR_DIV}
local limit, window_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local stored, count = -math.huge, 0
local state = redis.call('GET', KEYS[1])
if state then stored, count = struct.unpack('<dd', state) end
-- A reading from an earlier window than the stored one counts as no time passing.
local window = floor_div(now, window_ms)
if window < stored then window = stored end
local at = math.max(now, window * window_ms)
local used = 0
if window == stored then used = count end
local until_next = math.ceil((window + 1) * window_ms - at)
if used + permits > limit then
  return {limit - used, until_next, until_next}
end
redis.call('SET', KEYS[1], struct.pack('<dd', window, used + permits), 'PX', ms(until_next))
return {limit - used - permits, until_next}
`;
