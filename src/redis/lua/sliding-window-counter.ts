import { CEIL_DIV, FLOOR_DIV, FOREIGN, MUL_DIV } from './prelude';
import type { StringCodec } from './shell';

/**
 * Lua setting the locals `window`, `elapsed`, `previous` and `current`: the counts as seen at `now`
 * from the stored ones. A reading earlier than the latest grant counts as no time passing (a fresh
 * state has none). Inline, so that a decision calls no function for it.
 */
const ROLLED = `local w = r.window
  local window = floor_div(now, w)
  local elapsed = now - window * w
  if window <= stored and (stored_previous ~= 0 or stored_current ~= 0) then
    window = stored
    elapsed = math.max(now - window * w, stored_offset)
  end
  local previous, current = 0, 0
  if window == stored then
    previous, current = stored_previous, stored_current
  elseif window == stored + 1 then
    previous = stored_current
  end`;

/**
 * Lua for the whole permits left with `count` in the current window: the limit less the count and
 * the previous window's weight at `elapsed`, rounded up. Inline, as ROLLED.
 */
const available = (count: string) => `r.limit - ${count} - mul_div_ceil(previous, r.window - elapsed, r.window)`;

/**
 * The sliding window counter of src/algorithms/sliding-window-counter.ts, including its exact
 * retry time that may roll over one or two windows, as a codec for the string shell: the state is
 * the window's index, its previous and current counts, and how far into the window the latest
 * grant was. In debt the current count passes the limit (up to the debt bound) and weighs on the
 * next window as the previous count. A reservation's receipt is its window; a refund takes permits
 * off the count they are in while it still counts (the current one, then the previous one).
 */
export const SLIDING_WINDOW_COUNTER: StringCodec = {
  body: ['stored', 'stored_previous', 'stored_current', 'stored_offset'],
  folds: false,
  // What no counter holds (NaN, counts below 0 or past the debt bound) is a foreign value.
  valid: 'stored_previous >= 0 and stored_previous <= r.bound and stored_current >= 0 and stored_current <= r.bound and stored_offset >= 0 and stored_offset < r.window and stored < math.huge',
  decide: `${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local function prepare(limit, window)
  return { limit = limit, window = window, bound = math.min((1 + DEBT) * limit, MAX_SAFE), slack = math.min(math.floor(window / 4), SLACK_CAP) }
end


-- The one place the retry time is computed (the in-memory retryAfter, operation for operation).
local function retry_after(r, permits, previous, current, elapsed)
  local w, limit = r.window, r.limit
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

local function reset_after(r, previous, current, elapsed)
  if current > 0 then return math.ceil(2 * r.window - elapsed) end
  if previous > 0 then return math.ceil(r.window - elapsed) end
  return 0
end

local function decide(r, now, permits, stored, stored_previous, stored_current, stored_offset)
  ${ROLLED}
  local left = ${available('current')}
  if left < permits then
    local reset = reset_after(r, previous, current, elapsed)
    if permits == 0 then return true, 0, 0, reset end
    return false, math.max(0, left), retry_after(r, permits, previous, current, elapsed), reset
  end
  return true, left - permits, 0, reset_after(r, previous, current + permits, elapsed), window, previous, current + permits, elapsed
end
`,
  rest: `
function fresh(r)
  return -math.huge, 0, 0, 0
end


function charge(r, now, permits, stored, stored_previous, stored_current, stored_offset)
  ${ROLLED}
  local wanted, over = current + permits, false
  if wanted > r.bound then wanted, over = r.bound, true end
  return math.max(0, ${available('wanted')}), reset_after(r, previous, wanted, elapsed), over, window, previous, wanted, elapsed
end

-- As usedAt in memory: the count and the previous window's weight, rounded up.
function used(r, now, stored, previous, current, offset)
  local w = r.window
  local index = floor_div(now, w)
  if index >= stored + 2 or previous + current == 0 then return 0 end
  if index > stored then return mul_div_ceil(current, w - (now - index * w), w) end
  return current + mul_div_ceil(previous, w - math.max(now - stored * w, offset), w)
end

function mark(r, stored)
  return stored
end

function refund(r, now, permits, window, stored, previous, current, offset)
  local index = math.max(floor_div(now, r.window), stored)
  if window == stored and index <= window + 1 then current = current - math.min(permits, current)
  elseif window == stored - 1 and index == stored then previous = previous - math.min(permits, previous) end
  return stored, previous, current, offset
end

-- The state the previous version wrote under the same rule: 32 bytes (window, previous, current,
-- offset), then once blocked or reserved the block end and a stamp.
function legacy(r, state)
  if #state ~= 32 and #state ~= 48 then ${FOREIGN} end
  local stored, previous, current, offset = struct.unpack('<dddd', state)
  local block = -math.huge
  if #state == 48 then block = legacy_tail(state, 33) end
  return stored, previous, current, offset, block
end
`,
};
