import { FLOOR_DIV, FOREIGN, blockedAnswer, readTail } from './prelude';

/**
 * The fixed window of src/algorithms/fixed-window.ts, as a `decide` and the `OPERATIONS` for
 * {@link batchScript}. A key holds two packed doubles: the index of the window the count belongs
 * to (window i covers [i·windowMs, (i+1)·windowMs)) and the permits counted in it; once blocked or
 * reserved, the tail of two more (see `readTail` in prelude.ts). ARGV[1..2]: limit, windowMs.
 *
 * In debt (a charge) the count passes the limit, up to twice it (below 2^53), and refuses every request until
 * the window ends; a reservation's receipt is its window, and a refund takes permits off the count
 * only while that window lasts.
 */
export const FIXED_WINDOW = `${FLOOR_DIV}
local limit, window_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

-- mode: see blockedAnswer in prelude.ts. Beyond the decision, a grant returns its window and the stamp of the key's receipts.
local function decide(key, now, permits, server_now, mode)
  local stored, count, block, stamp = -math.huge, 0, nil, 0
  local state = redis.call('GET', key)
  if state then
    if #state == 16 then
      stored, count = struct.unpack('<dd', state)
    else
      stored, count = unpacked(string.sub(state, 1, 16), '<dd', 16)
      ${readTail('state', 16)}
    end
    -- What no window holds (NaN, a count below 0 or past the debt bound) is a foreign value.
    if not (count >= 0 and count <= 2 * limit and stored < math.huge) then ${FOREIGN} end
  end
  -- A reading from an earlier window than the stored count's counts as no time passing.
  local window = floor_div(now, window_ms)
  if window < stored and count > 0 then window = stored end
  local at = math.max(now, window * window_ms)
  local shut = block and block > at and mode ~= 'own' and mode ~= 'charge'
  local used = 0
  if window == stored then used = count end
  local until_next = math.ceil((window + 1) * window_ms - at)
  if used + permits > limit then
    -- In debt (a charge) even 0 permits do not fit; for the state now (peek 0), simply none left.
    local retry = until_next
    if permits == 0 then retry = 0 end
    if shut then ${blockedAnswer('at', 'retry', 'until_next')} end
    if permits == 0 then return true, 0, 0, until_next end
    return false, math.max(0, limit - used), until_next, until_next
  end
  local reset = until_next
  if used + permits == 0 then reset = 0 end
  if shut then ${blockedAnswer('at', '0', 'reset')} end
  if mode and mode ~= 'reserve' and mode ~= 'charge' then return true, limit - used - permits, 0, reset end
  if window == stored then
    -- The window's first grant set the expiry to its end: keep it, and overwrite in place.
    redis.call('SETRANGE', key, 0, struct.pack('<dd', window, used + permits))
  elseif block then
    -- A charge may spend while blocked: the expiry still covers the block.
    redis.call('SET', key, struct.pack('<dddd', window, used + permits, block, stamp), 'PX', ms(math.max(until_next, math.ceil(block - at))))
  else
    redis.call('SET', key, struct.pack('<dd', window, used + permits), 'PX', ms(until_next))
  end
  return true, limit - used - permits, 0, until_next, window, 0, 0, stamp
end
`;

/** The operations on one key (see batchScript), defined only when a call names one. */
export const FIXED_WINDOW_OPERATIONS = `
-- The window as an operation reads it: window, count, block (nil without a tail) and stamp.
local function counted(key)
  local state = redis.call('GET', key)
  if not state then return -math.huge, 0, nil, 0 end
  local stored, count = unpacked(string.sub(state, 1, 16), '<dd', 16)
  local block, stamp = tail_of(state, 16)
  if not (count >= 0 and count <= 2 * limit and stored < math.huge) then ${FOREIGN} end
  return stored, count, block, stamp
end


local function stamped(key, stamp)
  return stamp_string(key, 16, stamp)
end

-- Never refused. What passes the bound (twice the limit, never past 2^53 - 1, as usageBound in
-- src/algorithms/accounting.ts) is dropped and voids the receipts issued before.
function OPERATIONS.charge(key, now, server_now, permits)
  permits = tonumber(permits)
  local fits = charged_as_granted(key, now, permits, server_now)
  if fits then return fits end
  local stored, count, block, stamp = counted(key)
  local window = floor_div(now, window_ms)
  if window < stored and count > 0 then window = stored end
  local at = math.max(now, window * window_ms)
  local used = 0
  if window == stored then used = count end
  local until_next = math.ceil((window + 1) * window_ms - at)
  local wanted, bound = used + permits, math.min(2 * limit, 9007199254740991)
  if wanted > bound then
    wanted = bound
    stamp = 0
  end
  local state = struct.pack('<dd', window, wanted)
  if block then state = state .. struct.pack('<dd', block, stamp) end
  redis.call('SET', key, state, 'PX', ms(expiry(key, until_next, block, at)))
  return decision(true, 0, 0, until_next)
end

-- Only from the window the permits were counted in, and only while it lasts; in place, so the
-- expiry and the tail stay. Answers the state now, the block aside, as a settle does.
function OPERATIONS.refund(key, now, server_now, permits, window, _, _, receipt)
  local stored, count, _, stamp = counted(key)
  if stamp ~= 0 and stamp == tonumber(receipt) and tonumber(window) == stored and floor_div(now, window_ms) <= stored then
    redis.call('SETRANGE', key, 0, struct.pack('<dd', stored, count - math.min(tonumber(permits), count)))
  end
  return decision(decide(key, now, 0, server_now, 'own'))
end

function OPERATIONS.block(key, now, server_now, duration)
  counted(key) -- read (and so checked) first
  return block_string(key, now, tonumber(duration), 16, struct.pack('<dd', -math.huge, 0))
end
`;
