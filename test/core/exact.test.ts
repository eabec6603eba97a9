import { fc, test } from '@fast-check/vitest';
import { expect } from 'vitest';
import { ceilDiv, floorDiv, gcd } from '../../src/core/exact';

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
