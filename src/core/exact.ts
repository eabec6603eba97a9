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

// Wide arithmetic for rules whose `limit × windowMs` passes 2^53 (up to 2^95 in the Rule domain):
// `a × b + c` is formed exactly in five 24-bit limbs (every partial product and column sum stays
// below 2^53) and divided one bit at a time. The Lua scripts hold the same function, operation for
// operation, so both decide such rules alike; below 2^53 it is one double division, as before.

const LIMB = 2 ** 24;

/**
 * `[q, r]` with `a × b + c = q × d + r` and `0 <= r < d`, exactly, for safe integers `a, b, c >= 0`
 * and `d >= 1` whose quotient `q` is below 2^53 (the caller knows a bound). Fractional operands
 * (a fractional clock) get the rounded double answer: exactness is promised on integer clocks.
 */
export function mulDivMod(a: number, b: number, c: number, d: number): [number, number] {
  const n = a * b + c;
  if (n <= Number.MAX_SAFE_INTEGER || !(Number.isInteger(a) && Number.isInteger(b) && Number.isInteger(c))) {
    const q = floorDiv(n, d);
    return [q, n - q * d];
  }
  const [a0, a1, a2] = limbs(a);
  const [b0, b1, b2] = limbs(b);
  const [c0, c1, c2] = limbs(c);
  // Column sums below 3 · 2^48 + 2^26: exact.
  let t = a0 * b0 + c0;
  const n0 = t % LIMB;
  t = Math.floor(t / LIMB) + a0 * b1 + a1 * b0 + c1;
  const n1 = t % LIMB;
  t = Math.floor(t / LIMB) + a0 * b2 + a1 * b1 + a2 * b0 + c2;
  const n2 = t % LIMB;
  t = Math.floor(t / LIMB) + a1 * b2 + a2 * b1;
  const n3 = t % LIMB;
  const n4 = Math.floor(t / LIMB) + a2 * b2;
  let q = 0;
  let r = 0;
  for (const limb of [n4, n3, n2, n1, n0]) {
    for (let bit = LIMB / 2; bit >= 1; bit /= 2) {
      const one = limb % (2 * bit) >= bit ? 1 : 0;
      // r = 2r + one, less d when that reaches d; written so that no step passes 2^53.
      if (r >= d - r - one) {
        r -= d - r - one;
        q = 2 * q + 1;
      } else {
        r = r + r + one;
        q = 2 * q;
      }
    }
  }
  return [q, r];
}

/** `floor(a × b / d)`, exactly, under the conditions of {@link mulDivMod}. */
export function mulDivFloor(a: number, b: number, d: number): number {
  const n = a * b;
  return n <= Number.MAX_SAFE_INTEGER ? floorDiv(n, d) : mulDivMod(a, b, 0, d)[0];
}

/** `ceil(a × b / d)`, exactly, under the conditions of {@link mulDivMod}. */
export function mulDivCeil(a: number, b: number, d: number): number {
  const n = a * b;
  if (n <= Number.MAX_SAFE_INTEGER) return ceilDiv(n, d);
  const [q, r] = mulDivMod(a, b, 0, d);
  return r > 0 ? q + 1 : q;
}

function limbs(x: number): [number, number, number] {
  return [x % LIMB, Math.floor(x / LIMB) % LIMB, Math.floor(x / (LIMB * LIMB))];
}
