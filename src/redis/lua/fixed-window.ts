import { FLOOR_DIV, FOREIGN } from './prelude';
import type { StringCodec } from './shell';

/**
 * Lua setting the locals `window`, `counted` and `until_next` from `now` and the stored `stored`
 * and `count`: the window the reading falls in (one earlier than the stored count's counts as no
 * time passing), the permits counted in it, and the ms until it ends. Inline, so that a decision
 * calls no function for it.
 */
const ROLLED = `local window = floor_div(now, r.window)
  if window < stored and count > 0 then window = stored end
  local counted = 0
  if window == stored then counted = count end
  local until_next = math.ceil((window + 1) * r.window - math.max(now, window * r.window))`;

/**
 * The fixed window of src/algorithms/fixed-window.ts as a codec for the string shell: the state is
 * the index of the window the count belongs to (window i covers [i·windowMs, (i+1)·windowMs)) and
 * the permits counted in it, past the limit in debt (up to the debt bound). A reservation's receipt
 * is its window; a refund takes permits off the count only while that window lasts.
 */
export const FIXED_WINDOW: StringCodec = {
  body: ['stored', 'count'],
  folds: false,
  // What no window holds (NaN, a count below 0 or past the debt bound) is a foreign value.
  valid: 'count >= 0 and count <= r.bound and stored < math.huge',
  decide: `${FLOOR_DIV}
local function prepare(limit, window)
  return { limit = limit, window = window, bound = math.min((1 + DEBT) * limit, MAX_SAFE), slack = math.min(math.floor(window / 4), SLACK_CAP) }
end

local function decide(r, now, permits, stored, count)
  ${ROLLED}
  if counted + permits > r.limit then
    if permits == 0 then return true, 0, 0, until_next end
    return false, math.max(0, r.limit - counted), until_next, until_next
  end
  if counted + permits == 0 then return true, r.limit, 0, 0, window, 0 end
  return true, r.limit - counted - permits, 0, until_next, window, counted + permits
end
`,
  rest: `
function fresh(r)
  return -math.huge, 0
end

function charge(r, now, permits, stored, count)
  ${ROLLED}
  local wanted, over = counted + permits, false
  if wanted > r.bound then wanted, over = r.bound, true end
  return math.max(0, r.limit - wanted), until_next, over, window, wanted
end

function used(r, now, stored, count)
  if floor_div(now, r.window) > stored then return 0 end
  return count
end

function mark(r, stored, count)
  return stored
end

function refund(r, now, permits, window, stored, count)
  if window == stored and floor_div(now, r.window) <= stored then return stored, count - math.min(permits, count) end
  return stored, count
end

-- The state the previous version wrote under the same rule: 16 bytes (window, count), then once
-- blocked or reserved the block end and a stamp.
function legacy(r, state)
  if #state ~= 16 and #state ~= 32 then ${FOREIGN} end
  local stored, count = struct.unpack('<dd', state)
  local block = -math.huge
  if #state == 32 then block = legacy_tail(state, 17) end
  return stored, count, block
end
`,
};
