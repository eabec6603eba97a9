import { CEIL_DIV, FLOOR_DIV, FOREIGN, MUL_DIV, blockedAnswer, readTail } from './prelude';

/**
 * Lua setting the locals `window`, `elapsed`, `previous` and `current`: the counts as seen at `now`
 * from the stored ones. Inline, so a decision defines no function for it.
 */
const ROLLED = `local window = floor_div(now, w)
  local elapsed = now - window * w
  -- A reading earlier than the latest grant counts as no time passing (a fresh state has none).
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
 * The sliding window counter of src/algorithms/sliding-window-counter.ts, including its exact
 * retry time that may roll over one or two windows, as a `decide` and the `OPERATIONS` for
 * {@link batchScript}. A key holds four packed doubles: the window's index, its previous and
 * current counts, and how far into the window the latest grant was; once blocked or reserved, the
 * tail of two more (see `readTail` in prelude.ts). ARGV[1..2]: limit, windowMs.
 *
 * In debt (a charge) the current count passes the limit, up to twice it, and weighs on the next
 * window as the previous count; a reservation's receipt is its window, and a refund takes permits
 * off the count they are in while it still counts (the current one, then the previous one).
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

-- mode: see blockedAnswer in prelude.ts. Beyond the decision, a grant returns its window and the stamp of the key's receipts.
local function decide(key, now, permits, server_now, mode)
  local stored, stored_previous, stored_current, stored_offset, block, stamp = -math.huge, 0, 0, 0, nil, 0
  local state = redis.call('GET', key)
  if state then
    if #state == 32 then
      stored, stored_previous, stored_current, stored_offset = struct.unpack('<dddd', state)
    else
      stored, stored_previous, stored_current, stored_offset = unpacked(string.sub(state, 1, 32), '<dddd', 32)
      ${readTail('state', 32)}
    end
    -- What no counter holds (NaN, counts below 0 or past the debt bound) is a foreign value.
    if not (stored_previous >= 0 and stored_previous <= 2 * limit and stored_current >= 0 and stored_current <= 2 * limit and stored_offset >= 0 and stored_offset < w and stored < math.huge) then ${FOREIGN} end
  end
  ${ROLLED}
  local shut = block and block > window * w + elapsed and mode ~= 'own' and mode ~= 'charge'
  -- Whole permits left: the limit less the count and the previous window's weight, rounded up.
  local available = limit - current - mul_div_ceil(previous, w - elapsed, w)
  if available < permits then
    local reset = reset_after(previous, current, elapsed)
    -- In debt even 0 permits do not fit; for the state now (peek 0), simply none left.
    local retry = 0
    if permits > 0 then retry = retry_after(permits, previous, current, elapsed) end
    if shut then ${blockedAnswer('window * w + elapsed', 'retry', 'reset')} end
    if permits == 0 then return true, 0, 0, reset end
    return false, math.max(0, available), retry, reset
  end
  local reset = reset_after(previous, current + permits, elapsed)
  if shut then ${blockedAnswer('window * w + elapsed', '0', 'reset')} end
  if mode and mode ~= 'reserve' and mode ~= 'charge' then return true, available - permits, 0, reset end
  if window == stored then
    -- The window's first grant set the expiry to the end of the next window: keep it, overwrite in place.
    redis.call('SETRANGE', key, 0, struct.pack('<dddd', window, previous, current + permits, elapsed))
  elseif block then
    -- A charge may spend while blocked: the expiry still covers the block.
    local ttl = math.max(reset, math.ceil(block - window * w - elapsed))
    redis.call('SET', key, struct.pack('<dddddd', window, previous, current + permits, elapsed, block, stamp), 'PX', ms(ttl))
  else
    redis.call('SET', key, struct.pack('<dddd', window, previous, current + permits, elapsed), 'PX', ms(reset))
  end
  return true, available - permits, 0, reset, window, 0, 0, stamp
end
`;

/** The operations on one key (see batchScript), defined only when a call names one. */
export const SLIDING_WINDOW_COUNTER_OPERATIONS = `
-- The counts as an operation reads them, then block (nil without a tail) and stamp.
local function counted(key)
  local state = redis.call('GET', key)
  if not state then return -math.huge, 0, 0, 0, nil, 0 end
  local stored, previous, current, offset = unpacked(string.sub(state, 1, 32), '<dddd', 32)
  local block, stamp = tail_of(state, 32)
  if not (previous >= 0 and previous <= 2 * limit and current >= 0 and current <= 2 * limit and offset >= 0 and offset < w and stored < math.huge) then ${FOREIGN} end
  return stored, previous, current, offset, block, stamp
end


local function stamped(key, stamp)
  return stamp_string(key, 32, stamp)
end

-- Never refused: what goes past twice the limit (never past 2^53 - 1, as usageBound in
-- src/algorithms/accounting.ts) is forgiven, which voids the receipts issued before.
function OPERATIONS.charge(key, now, server_now, permits)
  permits = tonumber(permits)
  local fits = charged_as_granted(key, now, permits, server_now)
  if fits then return fits end
  local stored, stored_previous, stored_current, stored_offset, block, stamp = counted(key)
  ${ROLLED}
  local wanted = current + permits
  local bound = math.min(2 * limit, 9007199254740991)
  if wanted > bound then
    wanted = bound
    stamp = 0
  end
  local reset = reset_after(previous, wanted, elapsed)
  local state = struct.pack('<dddd', window, previous, wanted, elapsed)
  if block then state = state .. struct.pack('<dd', block, stamp) end
  redis.call('SET', key, state, 'PX', ms(expiry(key, reset, block, window * w + elapsed)))
  return decision(true, math.max(0, limit - wanted - mul_div_ceil(previous, w - elapsed, w)), 0, reset)
end

-- Off the current count while its window lasts, off the previous count through the next window
-- (exactly the weight still counted), nothing after; in place, so the expiry and the tail stay.
-- Answers the state now, the block aside, as a settle does.
function OPERATIONS.refund(key, now, server_now, permits, window, _, _, receipt)
  local stored, previous, current, offset, _, stamp = counted(key)
  window, permits = tonumber(window), tonumber(permits)
  if stamp ~= 0 and stamp == tonumber(receipt) then
    local index = math.max(floor_div(now, w), stored)
    if window == stored and index <= window + 1 then
      current = current - math.min(permits, current)
      redis.call('SETRANGE', key, 0, struct.pack('<dddd', stored, previous, current, offset))
    elseif window == stored - 1 and index == stored then
      previous = previous - math.min(permits, previous)
      redis.call('SETRANGE', key, 0, struct.pack('<dddd', stored, previous, current, offset))
    end
  end
  return decision(decide(key, now, 0, server_now, 'own'))
end

function OPERATIONS.block(key, now, server_now, duration)
  counted(key) -- read (and so checked) first
  return block_string(key, now, tonumber(duration), 32, struct.pack('<dddd', -math.huge, 0, 0, 0))
end
`;
