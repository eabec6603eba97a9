// Integer division that stays exact for every operand below 2^53. `Math.ceil(n / d)` alone is not:
// the quotient is rounded before it is ceiled, so 1e12 + 1e-6 becomes 1e12 and a retry time comes
// out one millisecond early. One multiply-and-compare corrects the rounded guess. For operands that
// are not integers (a fractional clock or window) the result is the nearest sensible whole number.

/** The smallest integer `q` with `q * d >= n`, for `d > 0`. */
export function ceilDiv(n: number, d: number): number {
  const q = Math.ceil(n / d);
  if (q * d < n) return q + 1;
  if ((q - 1) * d >= n) return q - 1;
  return q;
}

/** The largest integer `q` with `q * d <= n`, for `d > 0`. */
export function floorDiv(n: number, d: number): number {
  const q = Math.floor(n / d);
  if (q * d > n) return q - 1;
  if ((q + 1) * d <= n) return q + 1;
  return q;
}

/** The greatest common divisor of two positive integers. */
export function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}
