import { FLOOR_DIV } from './prelude';

/**
 * The fixed window of src/algorithms/fixed-window.ts, as a `decide` for {@link batchScript}. A key
 * holds two packed doubles: the index of the window the count belongs to (window i covers
 * [i·windowMs, (i+1)·windowMs)) and the permits granted in it. ARGV[1..2]: limit, windowMs.
 */
export const FIXED_WINDOW = `${FLOOR_DIV}
local limit, window_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

local function decide(key, now, permits)
  local stored, count = -math.huge, 0
  local state = redis.call('GET', key)
  if state then stored, count = unpacked(state, '<dd', 16) end
  -- A reading from an earlier window than the stored one counts as no time passing.
  local window = floor_div(now, window_ms)
  if window < stored then window = stored end
  local at = math.max(now, window * window_ms)
  local used = 0
  if window == stored then used = count end
  local until_next = math.ceil((window + 1) * window_ms - at)
  if used + permits > limit then
    return false, limit - used, until_next, until_next
  end
  if window == stored then
    -- The window's first grant set the expiry to its end: keep it, and overwrite in place.
    redis.call('SETRANGE', key, 0, struct.pack('<dd', window, used + permits))
  else
    redis.call('SET', key, struct.pack('<dd', window, used + permits), 'PX', ms(until_next))
  end
  return true, limit - used - permits, 0, until_next
end
`;
