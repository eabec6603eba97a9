import { CEIL_DIV, FLOOR_DIV, FOREIGN, MUL_DIV, blockedAnswer, readTail } from './prelude';

/**
 * The token bucket (and the leaky bucket, which decides identically) of
 * src/algorithms/token-bucket.ts, as a `decide` and the `OPERATIONS` for {@link batchScript}. A
 * key holds three packed doubles: the scaled tokens left, the time they were counted at, and the
 * server time (less 1 ms) its expiry was last set to; once blocked or reserved, the tail of two
 * more (see `readTail` in prelude.ts). ARGV[1..3]: units added per ms, units per token, the limit.
 *
 * A rule whose capacity (`limit × units per token`) passes 2^52 is decided by `decide_wide`, as the
 * in-memory bucket's wide plan is (src/algorithms/wide-bucket.ts): its key holds four doubles, whole
 * tokens left (below zero in debt), the units toward the next token, the time and the expiry time
 * (and the tail).
 *
 * A key must live until its bucket is full again, and that moment moves later with every grant;
 * setting the expiry (`SET ... PX`) was half of a decision's cost inside Redis (bench/HISTORY.md).
 * So a key is given `slack` more than it needs, a quarter window and at most a minute, and its
 * expiry is set again only when less than half of that is left: until then a grant overwrites the
 * first 16 bytes in place (`SETRANGE`). An idle key outlives its full bucket by at most `slack`. Expiries are on the server's clock.
 *
 * In debt (a charge) the units go below zero, down to one full bucket below; a reservation's
 * receipt is the units left right after its grant, when, and the units the key's refunds had given
 * back by then, and a refund gives back only the part of that deficit neither refill nor other
 * refunds have repaid since, as in memory. The units refunds give back are counted in the tail, a
 * third double once a refund gave something (a bucket that is not wide only).
 */
export const TOKEN_BUCKET = `${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local per_ms, per_token, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local capacity = limit * per_token
local window_ms = per_token * (limit / per_ms)
local slack = math.floor(math.min(window_ms / 4, 60000))
-- As in memory (Plan.wide): past a capacity of 2^52 units, a full bucket down to a full debt would
-- span more than 2^53, so whole tokens and the units toward the next are kept apart.
local wide = 2 * capacity > 9007199254740991

-- For a bucket in debt: the whole ms until refill has repaid it, and the whole tokens and units it
-- then holds (src/algorithms/wide-bucket.ts repay).
local function repay(tokens, partial)
  local q, r = mul_div_mod(-tokens - 1, per_token, per_token - partial, per_ms)
  local above, wait = 0, q
  if r > 0 then above, wait = per_ms - r, q + 1 end
  local whole = floor_div(above, per_token)
  return wait, whole, above - whole * per_token
end

-- Whole tokens and units toward the next after elapsed ms of refill, capped at a full bucket; a
-- debt is repaid first, so that no quotient passes the limit.
local function refill_wide(tokens, partial, elapsed)
  if tokens < 0 then
    local wait, above, rest = repay(tokens, partial)
    if elapsed < wait then
      local more, left = mul_div_mod(elapsed, per_ms, partial, per_token)
      return tokens + more, left
    end
    tokens, partial, elapsed = above, rest, elapsed - wait
  end
  if tokens == limit or elapsed >= window_ms then return limit, 0 end
  local more, rest = mul_div_mod(elapsed, per_ms, partial, per_token)
  if tokens + more >= limit then return limit, 0 end
  return tokens + more, rest
end

-- Whole ms until tokens (with partial units toward the next) reach wanted.
local function until_tokens(wanted, tokens, partial)
  if tokens >= wanted then return 0 end
  if tokens < 0 then
    local wait, above, rest = repay(tokens, partial)
    return wait + until_tokens(wanted, above, rest)
  end
  local q, r = mul_div_mod(wanted - tokens - 1, per_token, per_token - partial, per_ms)
  if r > 0 then return q + 1 end
  return q
end

local function decide_wide(key, now, permits, server_now, mode)
  local tokens, partial, last, expires, block, stamp = limit, 0, now, 0, nil, 0
  local state = redis.call('GET', key)
  if state then
    tokens, partial, last, expires = unpacked(string.sub(state, 1, 32), '<dddd', 32)
    if #state ~= 32 then
      ${readTail('state', 32)}
    end
    if not (tokens <= limit and tokens >= -limit and partial >= 0 and partial < per_token and last < math.huge) then ${FOREIGN} end
  end
  if now < last then now = last end
  local shut = block and block > now and mode ~= 'own' and mode ~= 'charge'
  tokens, partial = refill_wide(tokens, partial, now - last)
  if tokens < permits then
    -- In debt even 0 permits do not fit; for the state now (peek 0), simply none left.
    local reset = until_tokens(limit, tokens, partial)
    local retry = 0
    if permits > 0 then retry = until_tokens(permits, tokens, partial) end
    if shut then ${blockedAnswer('now', 'retry', 'reset')} end
    if permits == 0 then return true, 0, 0, reset end
    return false, math.max(0, tokens), retry, reset
  end
  local left = tokens - permits
  local reset = until_tokens(limit, left, partial)
  if shut then ${blockedAnswer('now', '0', 'reset')} end
  if mode and mode ~= 'reserve' and mode ~= 'charge' then return true, left, 0, reset end
  if server_now + reset + slack / 2 <= expires then
    redis.call('SETRANGE', key, 0, struct.pack('<ddd', left, partial, now))
  elseif block then
    local ttl = math.max(reset + slack, math.ceil(block - now))
    redis.call('SET', key, struct.pack('<dddddd', left, partial, now, server_now + ttl - 1, block, stamp), 'PX', ms(ttl))
  else
    redis.call('SET', key, struct.pack('<dddd', left, partial, now, server_now + reset + slack - 1), 'PX', ms(reset + slack))
  end
  return true, left, 0, reset, now, left, partial, stamp
end

-- mode: see blockedAnswer in prelude.ts. Beyond the decision, a grant returns what a receipt needs
-- (the time, and the units left right after the grant: see BucketReceipt) and the stamp of the key's receipts.
local function decide(key, now, permits, server_now, mode)
  if wide then return decide_wide(key, now, permits, server_now, mode) end
  -- A missing key is a full bucket: the key expires only once the bucket has refilled.
  local units, last, expires, block, stamp = capacity, now, 0, nil, 0
  local state = redis.call('GET', key)
  if state then
    if #state == 24 then
      units, last, expires = struct.unpack('<ddd', state)
    else
      units, last, expires = unpacked(string.sub(state, 1, 24), '<ddd', 24)
      ${readTail('state', 24, 'true')}
    end
    -- What no bucket holds (NaN, more than full, deeper than the debt bound) is a foreign value.
    if not (units <= capacity and units >= -capacity and last < math.huge) then ${FOREIGN} end
  end
  -- A reading earlier than the last one counts as no time passing.
  if now < last then now = last end
  local shut = block and block > now and mode ~= 'own' and mode ~= 'charge'
  local refilled = units + (now - last) * per_ms
  if refilled < capacity then units = refilled else units = capacity end
  local cost = permits * per_token
  if units < cost then
    -- In debt: refused even 0 permits by the formula; for the state now (peek 0), simply none left.
    local reset = ceil_div(capacity - units, per_ms)
    local retry = 0
    if permits > 0 then retry = ceil_div(cost - units, per_ms) end
    if shut then ${blockedAnswer('now', 'retry', 'reset')} end
    if permits == 0 then return true, 0, 0, reset end
    return false, math.max(0, floor_div(units, per_token)), retry, reset
  end
  local left = units - cost
  local reset = ceil_div(capacity - left, per_ms)
  if shut then ${blockedAnswer('now', '0', 'reset')} end
  if mode and mode ~= 'reserve' and mode ~= 'charge' then return true, floor_div(left, per_token), 0, reset end
  if server_now + reset + slack / 2 <= expires then
    redis.call('SETRANGE', key, 0, struct.pack('<dd', left, now))
  elseif block then
    -- A charge may spend while blocked: the expiry still covers the block. The tail stays as it is.
    local ttl = math.max(reset + slack, math.ceil(block - now))
    redis.call('SET', key, struct.pack('<ddd', left, now, server_now + ttl - 1) .. string.sub(state, 25), 'PX', ms(ttl))
  else
    -- Recorded 1 ms short: Redis may count the expiry from a millisecond before server_now.
    redis.call('SET', key, struct.pack('<ddd', left, now, server_now + reset + slack - 1), 'PX', ms(reset + slack))
  end
  return true, floor_div(left, per_token), 0, reset, now, left, 0, stamp
end
`;

/** The operations on one key (see batchScript), defined only when a call names one. */
export const TOKEN_BUCKET_OPERATIONS = `
-- The bucket as an operation reads it: units (for a wide bucket whole tokens, then the units toward
-- the next), last, block (nil without a tail), stamp, and the units its refunds have given back
-- (counted for a bucket that is not wide only, in its tail: see OPERATIONS.refund).
local function bucket(key)
  local state = redis.call('GET', key)
  if wide then
    if not state then return limit, 0, -math.huge, nil, 0, 0 end
    local tokens, partial, last = unpacked(string.sub(state, 1, 32), '<dddd', 32)
    local block, stamp = tail_of(state, 32)
    if not (tokens <= limit and tokens >= -limit and partial >= 0 and partial < per_token and last < math.huge) then ${FOREIGN} end
    return tokens, partial, last, block, stamp, 0
  end
  if not state then return capacity, 0, -math.huge, nil, 0, 0 end
  local units, last = unpacked(string.sub(state, 1, 24), '<ddd', 24)
  local block, stamp, credited = tail_of(state, 24, true)
  if not (units <= capacity and units >= -capacity and last < math.huge) then ${FOREIGN} end
  return units, 0, last, block, stamp, credited
end

-- The units held at now (not earlier than last), refill applied up to the capacity.
local function units_at(units, last, now)
  local refilled = units + (now - last) * per_ms
  if refilled < capacity then return refilled end
  return capacity
end

-- Writes the bucket, its expiry covering its refill (debt included), its block and its count of units given back.
local function store(key, units, partial, now, server_now, block, stamp, credited, reset)
  local ttl = expiry(key, reset + slack, block, now)
  local state
  if wide then state = struct.pack('<dddd', units, partial, now, server_now + ttl - 1)
  else state = struct.pack('<ddd', units, now, server_now + ttl - 1) end
  if block then state = state .. struct.pack('<dd', block, stamp) end
  if credited > 0 then state = state .. struct.pack('<d', credited) end
  redis.call('SET', key, state, 'PX', ms(ttl))
end

local function stamped(key, stamp)
  if wide then return stamp_string(key, 32, stamp) end
  return stamp_string(key, 24, stamp)
end

-- A receipt of a bucket that is not wide records, third, the units the key's refunds had given back
-- by the grant (a wide one's, the units toward the next token decide gave).
receipt_third = function(key, partial)
  if wide then return partial end
  local _, _, _, _, _, credited = bucket(key)
  return credited
end

-- Never refused: what goes past one full bucket of debt is forgiven, which voids the receipts
-- issued before (a refund could otherwise give back what the bound dropped).
function OPERATIONS.charge(key, now, server_now, permits)
  permits = tonumber(permits)
  local units, partial, last, block, stamp, credited = bucket(key)
  if now < last then now = last end
  if wide then
    local tokens, rest = refill_wide(units, partial, now - last)
    -- The bound is -limit whole tokens and no units; compared without forming a number past 2^53.
    if permits - limit > tokens then
      units, partial, stamp = -limit, 0, 0
    else
      units, partial = tokens - permits, rest
    end
    local reset = until_tokens(limit, units, partial)
    store(key, units, partial, now, server_now, block, stamp, credited, reset)
    return decision(true, math.max(0, units), 0, reset)
  end
  local wanted = units_at(units, last, now) - permits * per_token
  local floor = -capacity
  if wanted < floor then
    wanted = floor
    stamp = 0
  end
  local reset = ceil_div(capacity - wanted, per_ms)
  store(key, wanted, 0, now, server_now, block, stamp, credited, reset)
  return decision(true, math.max(0, floor_div(wanted, per_token)), 0, reset)
end

-- Gives back only what the grant left short of a full bucket and neither refill nor the key's other
-- refunds have repaid since (the receipt: the time; the units, for a wide bucket whole tokens,
-- left right after the grant; and for a bucket that is not wide the units its refunds had given
-- back by then, for a wide one the units toward the next token), as in memory; in place, so the
-- expiry and the block stay. The units given back are counted in the tail: past 2^53 - 1, the
-- receipts are voided (the stamp cleared) and the count starts again at 0. A wide bucket's refund
-- voids the receipts instead of counting. Answers the state now, the block aside, as a settle does.
function OPERATIONS.refund(key, now, server_now, permits, at, granted_units, granted_third, receipt)
  permits, at, granted_units, granted_third = tonumber(permits), tonumber(at), tonumber(granted_units), tonumber(granted_third)
  local units, partial, last, _, stamp, credited = bucket(key)
  if stamp ~= 0 and stamp == tonumber(receipt) then
    local at_now = now
    if at_now < last then at_now = last end
    if wide then
      -- The grant's state refilled to now: the tokens it is still short of full are what is owed.
      local granted, held = refill_wide(granted_units, granted_third, at_now - at)
      local short = limit - granted
      if short ~= 0 and permits ~= 0 then
        -- All the permits while fewer than that; else the whole deficit, short tokens less the units held.
        local owed, less = permits, 0
        if permits >= short then owed, less = short, held end
        local tokens, part = refill_wide(units, partial, at_now - last)
        if tokens > 0 and owed > limit - tokens then tokens, part = limit, 0
        elseif part < less then tokens, part = tokens + owed - 1, part - less + per_token
        else tokens, part = tokens + owed, part - less end
        if tokens >= limit then tokens, part = limit, 0 end
        redis.call('SETRANGE', key, 0, struct.pack('<ddd', tokens, part, at_now))
        redis.call('SETRANGE', key, 40, struct.pack('<d', 0))
      end
    else
      local owed = math.min(permits * per_token, capacity - granted_units - (at_now - at) * per_ms - (credited - granted_third))
      if owed > 0 then
        local held = units_at(units, last, at_now)
        local refunded = held + owed
        if refunded > capacity then refunded = capacity end
        if refunded - held > 9007199254740991 - credited then stamp, credited = 0, 0
        else credited = credited + (refunded - held) end
        redis.call('SETRANGE', key, 0, struct.pack('<dd', refunded, at_now))
        redis.call('SETRANGE', key, 32, struct.pack('<dd', stamp, credited))
      end
    end
  end
  return decision(decide(key, now, 0, server_now, 'own'))
end

function OPERATIONS.block(key, now, server_now, duration)
  -- Read (and so checked) as a decision reads it, spending nothing.
  decide(key, now, 0, server_now, 'own')
  if wide then return block_string(key, now, tonumber(duration), 32, struct.pack('<dddd', limit, 0, -math.huge, 0)) end
  return block_string(key, now, tonumber(duration), 24, struct.pack('<ddd', capacity, -math.huge, 0), true)
end
`;
