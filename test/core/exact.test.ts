import { fc, test } from '@fast-check/vitest';
import { expect } from 'vitest';
import { ceilDiv, floorDiv, gcd, mulDivCeil, mulDivFloor, mulDivMod } from '../../src/core/exact';

const big = fc.bigInt({ min: 0n, max: 2n ** 53n - 1n });
const divisor = fc.oneof(fc.bigInt({ min: 1n, max: 7n }), fc.bigInt({ min: 1n, max: 2n ** 53n - 1n }));

test.prop([big, divisor])('floorDiv and ceilDiv agree with exact integer division below 2^53', (n, d) => {
  const floor = n / d;
  const ceil = floor + (n % d === 0n ? 0n : 1n);
  expect(floorDiv(Number(n), Number(d))).toBe(Number(floor));
  expect(ceilDiv(Number(n), Number(d))).toBe(Number(ceil));
});

test.prop([fc.bigInt({ min: -(2n ** 52n), max: 0n }), fc.bigInt({ min: 1n, max: 100_000n })])(
  'floorDiv rounds negative quotients down, as window indices before zero need',
  (n, d) => {
    const q = n / d;
    expect(floorDiv(Number(n), Number(d))).toBe(Number(n % d === 0n ? q : q - 1n));
  },
);

test('gcd reduces a rate to lowest terms', () => {
  expect(gcd(4, 1000)).toBe(4);
  expect(gcd(997, 60_000)).toBe(1);
  expect(gcd(1_000_000_000, 86_400_000)).toBe(1_600_000);
});

const safe = fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 53n - 1n }), fc.bigInt({ min: 2n ** 53n - 1000n, max: 2n ** 53n - 1n }), fc.bigInt({ min: 0n, max: 1000n }));

test.prop([safe, safe, safe, safe])('mulDivMod divides a × b + c exactly wherever the quotient is below 2^53', (a, b, c, d0) => {
  const d = d0 === 0n ? 1n : d0;
  const n = a * b + c;
  fc.pre(n / d < 2n ** 53n);
  expect(mulDivMod(Number(a), Number(b), Number(c), Number(d))).toEqual([Number(n / d), Number(n % d)]);
  if (c === 0n) {
    expect(mulDivFloor(Number(a), Number(b), Number(d))).toBe(Number(n / d));
    expect(mulDivCeil(Number(a), Number(b), Number(d))).toBe(Number(n / d + (n % d === 0n ? 0n : 1n)));
  }
});

test('mulDivMod at the ends of the Rule domain', () => {
  const max = 2 ** 53 - 1;
  expect(mulDivMod(max, 2 ** 42, 2 ** 42 - 1, max)).toEqual([2 ** 42, 2 ** 42 - 1]);
  expect(mulDivMod(max, max, max - 1, max)).toEqual([max, max - 1]);
  expect(mulDivCeil(1_000_000_000, 86_400_000 - 1, 86_400_000)).toBe(999_999_989); // 1e9 - 11.57…, rounded up
});
