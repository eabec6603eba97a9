import { CEIL_DIV, FLOOR_DIV } from './prelude';

/**
 * The sliding window counter of src/algorithms/sliding-window-counter.ts, including its exact
 * retry time that may roll over one or two windows, as a `decide` for {@link batchScript}. A key
 * holds three packed doubles: the window's index and its previous and current counts.
 * ARGV[1..2]: limit, windowMs.
 */
export const SLIDING_WINDOW_COUNTER = `${FLOOR_DIV}${CEIL_DIV}
local limit, w = tonumber(ARGV[1]), tonumber(ARGV[2])

local function retry_after(permits, room, previous, current, elapsed)
  local until_next = w - elapsed
  -- Here previous > 0: with no previous weight, a request that fits the count would have been allowed.
  if current + permits <= limit then
    local wait = ceil_div(permits * w - room, previous)
    if wait < until_next then return math.ceil(wait) end
  end
  if current == 0 then return math.ceil(until_next) end
  local slack = (limit - permits) * w
  local into_next = math.max(0, ceil_div(current * w - slack, current))
  if into_next < w then return math.ceil(until_next + into_next) end
  return math.ceil(until_next + w)
end

local function reset_after(previous, current, elapsed)
  if current > 0 then return math.ceil(2 * w - elapsed) end
  if previous > 0 then return math.ceil(w - elapsed) end
  return 0
end

local function decide(key, now, permits)
  local stored, stored_previous, stored_current = -math.huge, 0, 0
  local state = redis.call('GET', key)
  if state then stored, stored_previous, stored_current = struct.unpack('<ddd', state) end
  -- A reading from an earlier window than the stored one counts as no time passing.
  local window = floor_div(now, w)
  if window < stored then window = stored end
  local start = window * w
  local elapsed = math.max(now, start) - start
  local previous, current = 0, 0
  if window == stored then
    previous, current = stored_previous, stored_current
  elseif window == stored + 1 then
    previous = stored_current
  end
  local room = (limit - current) * w - previous * (w - elapsed)
  if room < permits * w then
    local remaining = math.max(0, floor_div(room, w))
    return remaining, retry_after(permits, room, previous, current, elapsed), reset_after(previous, current, elapsed)
  end
  local reset = reset_after(previous, current + permits, elapsed)
  if window == stored then
    -- The window's first grant set the expiry to the end of the next window: keep it, overwrite in place.
    redis.call('SETRANGE', key, 0, struct.pack('<ddd', window, previous, current + permits))
  else
    redis.call('SET', key, struct.pack('<ddd', window, previous, current + permits), 'PX', ms(reset))
  end
  return floor_div(room - permits * w, w), 0, reset
end
`;
