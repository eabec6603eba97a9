import { CEIL_DIV, FLOOR_DIV, FOREIGN, MUL_DIV, blockedAnswer, readTail } from './prelude';

/**
 * The token bucket (and the leaky bucket, which decides identically) of
 * src/algorithms/token-bucket.ts, as a `decide` and the `OPERATIONS` for {@link batchScript}. A
 * key holds three packed doubles: the scaled tokens left, the time they were counted at, and the
 * server time (less 1 ms) its expiry was last set to; once blocked or reserved, the tail of two
 * more (see `readTail` in prelude.ts). ARGV[1..3]: units added per ms, units per token, the limit.
 *
 * A rule whose capacity (`limit × units per token`) passes 2^53 is decided by `decide_wide`, as the
 * in-memory bucket's wide plan is: its key holds four doubles, whole tokens left, the units toward
 * the next token, the time and the expiry time (and the tail). Like memory, it takes no charge and
 * no reservation (the limiter refuses them before sending).
 *
 * A key must live until its bucket is full again, and that moment moves later with every grant;
 * setting the expiry (`SET ... PX`) was half of a decision's cost inside Redis (~1.5 of 3.0 µs,
 * batches of 32 over 10 000 keys). So a key is given `slack` more than it needs, a quarter window
 * and at most a minute, and its expiry is set again only when less than half of that is left:
 * until then a grant overwrites the first 16 bytes in place (`SETRANGE`), ~2.3 µs a decision. An
 * idle key outlives its full bucket by at most `slack`. Expiries are on the server's clock.
 *
 * In debt (a charge) the units go below zero, down to one full bucket below; a reservation's
 * receipt is the deficit right after its grant and when, and a refund gives back only what refill
 * has not repaid since, as in memory.
 */
export const TOKEN_BUCKET = `${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local per_ms, per_token, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local capacity = limit * per_token
local window_ms = per_token * (limit / per_ms)
local slack = math.floor(math.min(window_ms / 4, 60000))
local wide = capacity > 9007199254740991

-- Whole tokens and units toward the next after elapsed ms of refill, capped at a full bucket.
local function refill_wide(tokens, partial, elapsed)
  if tokens == limit or elapsed >= window_ms then return limit, 0 end
  local more, rest = mul_div_mod(elapsed, per_ms, partial, per_token)
  if tokens + more >= limit then return limit, 0 end
  return tokens + more, rest
end

-- Whole ms until tokens (with partial units toward the next) reach wanted.
local function until_tokens(wanted, tokens, partial)
  if tokens >= wanted then return 0 end
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
    if not (tokens <= limit and tokens >= 0 and partial >= 0 and partial < per_token and last == last) then ${FOREIGN} end
  end
  if now < last then now = last end
  local shut = block and block > now and mode ~= 'own' and mode ~= 'charge'
  -- No receipts past 2^53 units: a reservation is refused plainly (by the limiter, as in memory),
  -- unless the block refuses it first.
  if mode == 'reserve' and not shut then return true end
  tokens, partial = refill_wide(tokens, partial, now - last)
  if tokens < permits then
    local retry, reset = until_tokens(permits, tokens, partial), until_tokens(limit, tokens, partial)
    if shut then ${blockedAnswer('now', 'retry', 'reset')} end
    return false, tokens, retry, reset
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
  return true, left, 0, reset
end

-- mode: see blockedAnswer in prelude.ts. Beyond the decision, a grant returns what a receipt needs: the time, the
-- deficit right after the grant, and the stamp of the key's receipts.
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
      ${readTail('state', 24)}
    end
    -- What no bucket holds (NaN, more than full, deeper than the debt bound) is a foreign value.
    if not (units <= capacity and units >= -capacity and last == last) then ${FOREIGN} end
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
    -- A charge may spend while blocked: the expiry still covers the block.
    local ttl = math.max(reset + slack, math.ceil(block - now))
    redis.call('SET', key, struct.pack('<ddddd', left, now, server_now + ttl - 1, block, stamp), 'PX', ms(ttl))
  else
    -- Recorded 1 ms short: Redis may count the expiry from a millisecond before server_now.
    redis.call('SET', key, struct.pack('<ddd', left, now, server_now + reset + slack - 1), 'PX', ms(reset + slack))
  end
  return true, floor_div(left, per_token), 0, reset, now, capacity - left, stamp
end
`;

/** The operations on one key (see batchScript), defined only when a call names one. */
export const TOKEN_BUCKET_OPERATIONS = `
-- The bucket as an operation reads it: units, last, block (nil without a tail) and stamp.
local function bucket(key)
  local state = redis.call('GET', key)
  if not state then return capacity, -math.huge, nil, 0 end
  local units, last = unpacked(string.sub(state, 1, 24), '<ddd', 24)
  local block, stamp = tail_of(state, 24)
  if not (units <= capacity and units >= -capacity and last == last) then ${FOREIGN} end
  return units, last, block, stamp
end

-- The units held at now (not earlier than last), refill applied up to the capacity.
local function units_at(units, last, now)
  local refilled = units + (now - last) * per_ms
  if refilled < capacity then return refilled end
  return capacity
end


local function stamped(key, stamp)
  return stamp_string(key, 24, stamp)
end

-- Never refused: what goes past one full bucket of debt is forgiven, which voids the receipts
-- issued before (a refund could otherwise give back what the bound dropped).
function OPERATIONS.charge(key, now, server_now, permits)
  local units, last, block, stamp = bucket(key)
  if now < last then now = last end
  local wanted = units_at(units, last, now) - tonumber(permits) * per_token
  local floor = -capacity
  if wanted < floor then
    wanted = floor
    stamp = 0
  end
  local reset = ceil_div(capacity - wanted, per_ms)
  local ttl = expiry(key, reset + slack, block, now)
  local state = struct.pack('<ddd', wanted, now, server_now + ttl - 1)
  if block then state = state .. struct.pack('<dd', block, stamp) end
  redis.call('SET', key, state, 'PX', ms(ttl))
  return decision(true, math.max(0, floor_div(wanted, per_token)), 0, reset)
end

-- Gives back only the part of the receipt's deficit that refill has not repaid since; in place, so
-- the expiry and the tail stay. Answers the state now, the block aside, as a settle does.
function OPERATIONS.refund(key, now, server_now, permits, at, deficit, receipt)
  local units, last, _, stamp = bucket(key)
  if stamp ~= 0 and stamp == tonumber(receipt) then
    local at_now = now
    if at_now < last then at_now = last end
    local owed = math.min(tonumber(permits) * per_token, tonumber(deficit) - (at_now - tonumber(at)) * per_ms)
    if owed > 0 then
      local refunded = units_at(units, last, at_now) + owed
      if refunded > capacity then refunded = capacity end
      redis.call('SETRANGE', key, 0, struct.pack('<dd', refunded, at_now))
    end
  end
  return decision(decide(key, now, 0, server_now, 'own'))
end

function OPERATIONS.block(key, now, server_now, duration)
  -- Read (and so checked) as a decision reads it, spending nothing.
  decide(key, now, 0, server_now, 'own')
  if wide then return block_string(key, now, tonumber(duration), 32, struct.pack('<dddd', limit, 0, -math.huge, 0)) end
  return block_string(key, now, tonumber(duration), 24, struct.pack('<ddd', capacity, -math.huge, 0))
end
`;
