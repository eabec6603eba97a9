import { CEIL_DIV, FLOOR_DIV, MUL_DIV } from './prelude';

/**
 * The sliding window counter of src/algorithms/sliding-window-counter.ts, including its exact
 * retry time that may roll over one or two windows, as a `decide` for {@link batchScript}. A key
 * holds four packed doubles: the window's index, its previous and current counts, and how far into
 * the window the latest grant was. ARGV[1..2]: limit, windowMs.
 */
export const SLIDING_WINDOW_COUNTER = `${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local limit, w = tonumber(ARGV[1]), tonumber(ARGV[2])

local function retry_after(permits, previous, current, elapsed)
  local until_next = w - elapsed
  -- The weight may be at most fits: previous * (w - elapsed - wait) <= fits * w.
  local fits = limit - current - permits
  if fits >= 0 and fits < previous then
    local wait = until_next - mul_div_floor(fits, w, previous)
    if wait < until_next then return math.ceil(wait) end
  end
  if current == 0 then return math.ceil(until_next) end
  -- In the next window the count carried over may weigh at most limit - permits.
  local into_next = 0
  if limit - permits < current then into_next = w - mul_div_floor(limit - permits, w, current) end
  if into_next < w then return math.ceil(until_next + into_next) end
  return math.ceil(until_next + w)
end

local function reset_after(previous, current, elapsed)
  if current > 0 then return math.ceil(2 * w - elapsed) end
  if previous > 0 then return math.ceil(w - elapsed) end
  return 0
end

local function decide(key, now, permits)
  local stored, stored_previous, stored_current, stored_offset = -math.huge, 0, 0, 0
  local state = redis.call('GET', key)
  if state then stored, stored_previous, stored_current, stored_offset = unpacked(state, '<dddd', 32) end
  -- A reading earlier than the latest grant counts as no time passing.
  local window = floor_div(now, w)
  local elapsed = now - window * w
  if window <= stored then
    window = stored
    elapsed = math.max(now - window * w, stored_offset)
  end
  local previous, current = 0, 0
  if window == stored then
    previous, current = stored_previous, stored_current
  elseif window == stored + 1 then
    previous = stored_current
  end
  -- Whole permits left: the limit less the count and the previous window's weight, rounded up.
  local available = limit - current - mul_div_ceil(previous, w - elapsed, w)
  if available < permits then
    return false, math.max(0, available), retry_after(permits, previous, current, elapsed), reset_after(previous, current, elapsed)
  end
  local reset = reset_after(previous, current + permits, elapsed)
  if window == stored then
    -- The window's first grant set the expiry to the end of the next window: keep it, overwrite in place.
    redis.call('SETRANGE', key, 0, struct.pack('<dddd', window, previous, current + permits, elapsed))
  else
    redis.call('SET', key, struct.pack('<dddd', window, previous, current + permits, elapsed), 'PX', ms(reset))
  end
  return true, available - permits, 0, reset
end
`;
