import { Rule } from '../../core/rule';
import { DEBT_LIMITS, expirySlackMs, MAX_RECEIPTS, MAX_SAFE } from '../../store/constants';

// Pieces every script holds. Lua numbers in Redis are IEEE doubles, as in JavaScript, so a script
// that performs the in-memory algorithm's operations in the same order gets the same bits.

/**
 * The numbers the scripts share with TypeScript (src/store/constants.ts), by the names the Lua
 * source uses for them: 2^53 − 1, the debt bound in limits, the receipts a key keeps, the largest
 * window a stored rule may name, and the expiry slack's cap.
 */
const CONSTANTS: Readonly<Record<string, number>> = {
  MAX_SAFE,
  DEBT: DEBT_LIMITS,
  MAX_RECEIPTS,
  MAX_WINDOW: Rule.MAX_WINDOW_MS,
  SLACK_CAP: expirySlackMs(MAX_SAFE),
};

/**
 * A script with the shared numbers written in where its source names them: literals, not locals,
 * since every local a function uses is captured again each time the script runs (see `dispatch`).
 * `math.huge` becomes `2^1024`, which the compiler folds to the same infinity: read as a global it
 * is two table lookups, and every decision checks its state against it.
 */
export function withConstants(lua: string): string {
  return lua.replace(/\b(MAX_SAFE|DEBT|MAX_RECEIPTS|MAX_WINDOW|SLACK_CAP)\b/g, (name) => String(CONSTANTS[name])).replace(/\bmath\.huge\b/g, '2^1024');
}

/**
 * `ms` writes a whole number of ms for PX and PEXPIRE. State kept in a string is packed with
 * `struct` as little-endian doubles: exact, as text written with '%.17g' would be (Lua's
 * `tostring` keeps only 14 digits), at a fraction of the cost, and the script's cost is what
 * bounds a busy Redis. The library functions every decision calls are locals: `redis.call` is two
 * table lookups per call, a local one upvalue read (such lookups were 3-5% of a decision's
 * instructions in Redis: bench/HISTORY.md).
 */
export const PRELUDE = `
local call, format, floor, ceil = redis.call, string.format, math.floor, math.ceil
local function ms(x)
  return format('%d', x)
end
`;

/**
 * The previous version's name of a key under rule r: its rule was in the name, after the first
 * `split` bytes (the prefixes, the name and the algorithm), as `limit/windowMs:` (DESIGN-24 D1).
 */
export const LEGACY_KEY = `
local function legacy_key(key, r, split)
  return string.sub(key, 1, split) .. string.format('%d/%d:', r.limit, r.window) .. string.sub(key, split + 1)
end
`;

/** The error of a key holding what no state of ours holds. */
export const FOREIGN = "error('ratekeeper: the key holds a value that is not a state of this algorithm')";

/** `floorDiv` from src/core/exact.ts, operation for operation. */
export const FLOOR_DIV = `
local function floor_div(n, d)
  local q = floor(n / d)
  if q * d > n then return q - 1 end
  if (q + 1) * d <= n then return q + 1 end
  return q
end
`;

/** `ceilDiv` from src/core/exact.ts, operation for operation. */
export const CEIL_DIV = `
local function ceil_div(n, d)
  local q = ceil(n / d)
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
  if n <= MAX_SAFE or a % 1 ~= 0 or b % 1 ~= 0 or c % 1 ~= 0 then
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
  if n <= MAX_SAFE then return floor_div(n, d) end
  local q = mul_div_mod(a, b, 0, d)
  return q
end

local function mul_div_ceil(a, b, d)
  local n = a * b
  if n <= MAX_SAFE then return ceil_div(n, d) end
  local q, r = mul_div_mod(a, b, 0, d)
  if r > 0 then return q + 1 end
  return q
end
`;
