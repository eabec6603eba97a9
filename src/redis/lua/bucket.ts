import { CEIL_DIV, FLOOR_DIV, FOREIGN, MUL_DIV } from './prelude';
import type { StringCodec } from './shell';

/**
 * The token bucket of src/algorithms/token-bucket.ts (the leaky bucket decides identically) as a
 * codec for the string shell: pure functions of a rule, a reading and the state's numbers. The
 * state is `units, partial, last`: the scaled units left (below zero in debt, down to one full
 * bucket below) and the time they were counted at; `partial` is 0, except for a rule whose
 * capacity passes 2^52 units (a "wide" bucket, src/algorithms/wide-bucket.ts), where `units` are
 * whole tokens and `partial` the units toward the next.
 *
 * Refunds are bounded by the lowest deficit since the grant (DESIGN-24 D4): `deficit` gives it as
 * a pair (x, y) worth `x` units (y = 0), or for a wide bucket `x` tokens less `y` units, with
 * `lower`, `owed`, `give` and `minus` the arithmetic the shell's receipts need on such pairs.
 */
export const BUCKET: StringCodec = {
  body: ['units', 'partial', 'last'],
  folds: true,
  // What no bucket holds (NaN, more than full, deeper than the debt bound) is a foreign value.
  // (`top` is the capacity, or for a wide bucket the limit in whole tokens; `bottom` the debt bound.)
  valid: `units <= r.top and units >= r.bottom and last < math.huge and (partial == 0 or (r.wide and partial > 0 and partial < r.per_token))`,
  decide: `${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local function prepare(limit, window)
  local a, b = limit, window
  while b ~= 0 do a, b = b, a % b end
  local per_ms, per_token = limit / a, window / a
  local capacity = limit * per_token
  local wide = (1 + DEBT) * capacity > MAX_SAFE
  local top = capacity
  if wide then top = limit end
  return { limit = limit, window = window, per_ms = per_ms, per_token = per_token, capacity = capacity,
    wide = wide, top = top, bottom = -DEBT * top, slack = math.min(math.floor(window / 4), SLACK_CAP) }
end

-- For a wide bucket in debt: the whole ms until refill has repaid it, and the whole tokens and units
-- it then holds (src/algorithms/wide-bucket.ts repay).
local function repay(r, tokens, partial)
  local q, rest = mul_div_mod(-tokens - 1, r.per_token, r.per_token - partial, r.per_ms)
  local above, wait = 0, q
  if rest > 0 then above, wait = r.per_ms - rest, q + 1 end
  local whole = floor_div(above, r.per_token)
  return wait, whole, above - whole * r.per_token
end

-- A wide bucket's whole tokens and units toward the next after elapsed ms of refill, capped at full.
local function refill_wide(r, tokens, partial, elapsed)
  if tokens < 0 then
    local wait, above, rest = repay(r, tokens, partial)
    if elapsed < wait then
      local more, left = mul_div_mod(elapsed, r.per_ms, partial, r.per_token)
      return tokens + more, left
    end
    tokens, partial, elapsed = above, rest, elapsed - wait
  end
  if tokens == r.limit or elapsed >= r.window then return r.limit, 0 end
  local more, rest = mul_div_mod(elapsed, r.per_ms, partial, r.per_token)
  if tokens + more >= r.limit then return r.limit, 0 end
  return tokens + more, rest
end

-- Whole ms until a wide bucket's tokens (with partial units toward the next) reach wanted.
local function until_tokens(r, wanted, tokens, partial)
  if tokens >= wanted then return 0 end
  if tokens < 0 then
    local wait, above, rest = repay(r, tokens, partial)
    return wait + until_tokens(r, wanted, above, rest)
  end
  local q, rest = mul_div_mod(wanted - tokens - 1, r.per_token, r.per_token - partial, r.per_ms)
  if rest > 0 then return q + 1 end
  return q
end

-- granted, remaining, retry, reset, then the state after a grant. In debt even 0 permits do not
-- fit; for the state now (peek 0), simply none left.
local function decide(r, now, permits, units, partial, last)
  if now < last then now = last end
  if r.wide then
    units, partial = refill_wide(r, units, partial, now - last)
    if units < permits then
      local reset = until_tokens(r, r.limit, units, partial)
      if permits == 0 then return true, 0, 0, reset end
      return false, math.max(0, units), until_tokens(r, permits, units, partial), reset
    end
    local left = units - permits
    return true, left, 0, until_tokens(r, r.limit, left, partial), left, partial, now
  end
  -- Refilled to now, capped at a full bucket (as level, inline: this runs once per decision). The
  -- rule's numbers are read once each: a field of r is a hash lookup.
  local per_ms, per_token, capacity = r.per_ms, r.per_token, r.capacity
  units = units + (now - last) * per_ms
  if units > capacity then units = capacity end
  local cost = permits * per_token
  if units < cost then
    local reset = ceil_div(capacity - units, per_ms)
    if permits == 0 then return true, 0, 0, reset end
    return false, math.max(0, floor_div(units, per_token)), ceil_div(cost - units, per_ms), reset
  end
  local left = units - cost
  return true, floor_div(left, per_token), 0, ceil_div(capacity - left, per_ms), left, 0, now
end
`,
  rest: `
function fresh(r)
  return r.top, 0, -math.huge
end

-- The bucket refilled to now (a reading earlier than last counts as no time passing).
function level(r, now, units, partial, last)
  if now < last then now = last end
  if r.wide then
    units, partial = refill_wide(r, units, partial, now - last)
    return units, partial, now
  end
  units = units + (now - last) * r.per_ms
  if units > r.capacity then units = r.capacity end
  return units, 0, now
end

-- remaining, reset, whether the debt bound forgave part of it, then the state after.
function charge(r, now, permits, units, partial, last)
  units, partial, now = level(r, now, units, partial, last)
  local over = false
  if r.wide then
    -- The bound is -limit whole tokens and no units; compared without forming a number past 2^53.
    if permits - DEBT * r.limit > units then units, partial, over = -DEBT * r.limit, 0, true
    else units = units - permits end
    return math.max(0, units), until_tokens(r, r.limit, units, partial), over, units, partial, now
  end
  -- A product past 2^53 rounds, but only for a charge far beyond the bound, which it stays beyond.
  local wanted = units - permits * r.per_token
  if wanted < -DEBT * r.capacity then wanted, over = -DEBT * r.capacity, true end
  return math.max(0, floor_div(wanted, r.per_token)), ceil_div(r.capacity - wanted, r.per_ms), over, wanted, 0, now
end

-- The whole permits counted as used now, debt included (rounded up), as usedAt in memory.
function used(r, now, units, partial, last)
  units, partial = level(r, now, units, partial, last)
  if r.wide then return r.limit - units end
  return ceil_div(r.capacity - units, r.per_token)
end

-- (A bucket that is not wide holds no partial units: 0.)
function deficit(r, units, partial)
  return r.top - units, partial
end

-- Whether deficit (x1, y1) is below (x2, y2): y is below one token, so x decides first.
function lower(x1, y1, x2, y2)
  return x1 < x2 or (x1 == x2 and y1 > y2)
end

-- What a refund of permits gives back when at most the deficit (x, y) is still owed.
function owed(r, permits, x, y)
  if r.wide then
    if permits >= x then return x, y end
    return permits, 0
  end
  return math.min(permits * r.per_token, x), 0
end

-- The deficit (x, y) less (gx, gy), never below 0.
function minus(r, x, y, gx, gy)
  local u = y - gy
  if u < 0 then return x - gx + 1, u + r.per_token end
  return x - gx, u
end

-- The bucket given back (gx, gy); never past full, since what is owed is at most the deficit now.
function give(r, units, partial, gx, gy)
  if not r.wide then return units + gx, 0 end
  local part = partial - gy
  if part < 0 then units, part = units + gx - 1, part + r.per_token else units = units + gx end
  if units >= r.limit then return r.limit, 0 end
  return units, part
end

-- The state the previous version wrote under the same rule (its scripts at git tag v-before-24):
-- 24 bytes (units, last, expiry) or for a wide bucket 32 (tokens, partial, last, expiry), then once
-- blocked or reserved the block end and a stamp, and maybe a count of units refunds gave back.
function legacy(r, state)
  local size = 24
  if r.wide then size = 32 end
  if #state ~= size and #state ~= size + 16 and (r.wide or #state ~= size + 24) then ${FOREIGN} end
  local units, partial, last = 0, 0, 0
  if r.wide then units, partial, last = struct.unpack('<ddd', state) else units, last = struct.unpack('<dd', state) end
  local block = -math.huge
  if #state > size then block = legacy_tail(state, size + 1) end
  return units, partial, last, block
end
`,
};
