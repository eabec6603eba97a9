// Pieces every script starts with. Lua numbers in Redis are IEEE doubles, as in JavaScript, so a
// script that performs the in-memory algorithm's operations in the same order gets the same bits.

/**
 * Reads `now` and `permits`. ARGV[1] is the caller's clock reading in ms, or '' for this server's
 * own clock, floored to whole ms as `systemClock` is: servers with skewed clocks then still share
 * one timeline. `ms` writes a whole number of ms for PX and PEXPIRE.
 *
 * State kept in a string is packed with `struct` as little-endian doubles: exact, as text written
 * with '%.17g' would be (Lua's `tostring` keeps only 14 digits), at a fraction of the cost, and
 * the script's cost is what bounds a busy Redis.
 */
export const PRELUDE = `
local now
if ARGV[1] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local permits = tonumber(ARGV[2])

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
