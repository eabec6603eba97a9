// Pieces every script holds. Lua numbers in Redis are IEEE doubles, as in JavaScript, so a script
// that performs the in-memory algorithm's operations in the same order gets the same bits.

/**
 * Helpers defined once per script run, not once per decision. `ms` writes a whole number of ms for
 * PX and PEXPIRE; `unpacked` reads a packed state, checking its size.
 *
 * State kept in a string is packed with `struct` as little-endian doubles: exact, as text written
 * with '%.17g' would be (Lua's `tostring` keeps only 14 digits), at a fraction of the cost, and
 * the script's cost is what bounds a busy Redis.
 */
export const PRELUDE = `
local function ms(x)
  return string.format('%d', x)
end

-- The doubles a script packed into a key; anything else under the key (another script's state,
-- a value someone else wrote) fails this key's decision alone.
local function unpacked(state, format, bytes)
  if #state ~= bytes then error('ratekeeper: the key holds ' .. #state .. ' bytes, not a state of this algorithm') end
  return struct.unpack(format, state)
end
`;

/** `floorDiv` from src/core/exact.ts, operation for operation. */
export const FLOOR_DIV = `
local function floor_div(n, d)
  local q = math.floor(n / d)
  if q * d > n then return q - 1 end
  if (q + 1) * d <= n then return q + 1 end
  return q
end
`;

/** `ceilDiv` from src/core/exact.ts, operation for operation. */
export const CEIL_DIV = `
local function ceil_div(n, d)
  local q = math.ceil(n / d)
  if q * d < n then return q + 1 end
  if (q - 1) * d >= n then return q - 1 end
  return q
end
`;

/**
 * `mulDivMod`, `mulDivFloor` and `mulDivCeil` from src/core/exact.ts, operation for operation: the
 * exact `a × b + c` over `d` that rules past 2^53 need. Needs {@link FLOOR_DIV} and {@link CEIL_DIV}.
 */
export const MUL_DIV = `
local LIMB = 16777216
local function limbs(x)
  return x % LIMB, math.floor(x / LIMB) % LIMB, math.floor(x / (LIMB * LIMB))
end

local function mul_div_mod(a, b, c, d)
  local n = a * b + c
  if n <= 9007199254740991 or a % 1 ~= 0 or b % 1 ~= 0 or c % 1 ~= 0 then
    local q = floor_div(n, d)
    return q, n - q * d
  end
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local c0, c1, c2 = limbs(c)
  local t = a0 * b0 + c0
  local n0 = t % LIMB
  t = math.floor(t / LIMB) + a0 * b1 + a1 * b0 + c1
  local n1 = t % LIMB
  t = math.floor(t / LIMB) + a0 * b2 + a1 * b1 + a2 * b0 + c2
  local n2 = t % LIMB
  t = math.floor(t / LIMB) + a1 * b2 + a2 * b1
  local n3 = t % LIMB
  local n4 = math.floor(t / LIMB) + a2 * b2
  local q, r = 0, 0
  for _, limb in ipairs({ n4, n3, n2, n1, n0 }) do
    local bit = LIMB / 2
    while bit >= 1 do
      local one = 0
      if limb % (2 * bit) >= bit then one = 1 end
      if r >= d - r - one then
        r = r - (d - r - one)
        q = 2 * q + 1
      else
        r = r + r + one
        q = 2 * q
      end
      bit = bit / 2
    end
  end
  return q, r
end

local function mul_div_floor(a, b, d)
  local n = a * b
  if n <= 9007199254740991 then return floor_div(n, d) end
  local q = mul_div_mod(a, b, 0, d)
  return q
end

local function mul_div_ceil(a, b, d)
  local n = a * b
  if n <= 9007199254740991 then return ceil_div(n, d) end
  local q, r = mul_div_mod(a, b, 0, d)
  if r > 0 then return q + 1 end
  return q
end
`;
