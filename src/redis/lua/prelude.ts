// Pieces every script holds. Lua numbers in Redis are IEEE doubles, as in JavaScript, so a script
// that performs the in-memory algorithm's operations in the same order gets the same bits.

/**
 * Helpers defined once per script run, not once per decision. `ms` writes a whole number of ms for
 * PX and PEXPIRE.
 *
 * State kept in a string is packed with `struct` as little-endian doubles: exact, as text written
 * with '%.17g' would be (Lua's `tostring` keeps only 14 digits), at a fraction of the cost, and
 * the script's cost is what bounds a busy Redis.
 */
export const PRELUDE = `
local function ms(x)
  return string.format('%d', x)
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
