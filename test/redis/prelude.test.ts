import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { ceilDiv, floorDiv } from '../../src/core/exact';
import { CEIL_DIV, FLOOR_DIV, MUL_DIV, PRELUDE, withConstants } from '../../src/redis/lua/prelude';
import { useIoredis, redisPort } from './helpers/clients';

// Runs the scripts' own helpers on pairs of operands and returns every result as exact text.
const probe = `${PRELUDE}${FLOOR_DIV}${CEIL_DIV}
local out = {}
for i = 1, #ARGV, 2 do
  local n, d = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = string.format('%.17g', floor_div(n, d))
  out[#out + 1] = string.format('%.17g', ceil_div(n, d))
end
return out`;

const operand = fc.oneof(
  fc.integer({ min: -1e6, max: 1e6 }),
  fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
  fc.double({ min: -1e15, max: 1e15, noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(1e12 + 1e-6, 0.1 + 0.2, 2 ** 53 - 1, 1e-9),
);

describe.skipIf(!redisPort)('the Lua prelude rounds exactly as src/core/exact.ts', () => {
  const redis = useIoredis();

  test.prop([fc.array(fc.tuple(operand, operand.filter((d) => d >= 1e-3)), { minLength: 1, maxLength: 50 })], { numRuns: 50 })(
    'floor_div and ceil_div give floorDiv and ceilDiv, bit for bit',
    async (pairs) => {
      const reply = (await redis.eval(probe, 0, ...pairs.flat().map(String))) as string[];
      // -0 travels to Redis as "0", so the sign of a zero is not compared (x + 0 turns -0 into 0).
      const zeroSigned = (x: number) => x + 0;
      expect(reply.map((x) => zeroSigned(Number(x)))).toEqual(pairs.flatMap(([n, d]) => [floorDiv(n, d), ceilDiv(n, d)].map(zeroSigned)));
    },
  );
});

// mul_div_mod's quotient and remainder, as exact text, for each quadruple of operands.
const wideProbe = withConstants(`${PRELUDE}${FLOOR_DIV}${CEIL_DIV}${MUL_DIV}
local out = {}
for i = 1, #ARGV, 4 do
  local q, r = mul_div_mod(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
  out[#out + 1] = string.format('%.17g', q)
  out[#out + 1] = string.format('%.17g', r)
end
return out`);

const safe = fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 53n - 1n }), fc.bigInt({ min: 2n ** 53n - 1000n, max: 2n ** 53n - 1n }), fc.bigInt({ min: 0n, max: 2n ** 42n }));

describe.skipIf(!redisPort)('the Lua mul_div_mod is exact, as mulDivMod is', () => {
  const redis = useIoredis();

  test.prop([fc.array(fc.tuple(safe, safe, safe, safe.map((d) => (d === 0n ? 1n : d))), { minLength: 1, maxLength: 40 })], { numRuns: 50 })(
    'a × b + c over d, quotient and remainder, equal BigInt division wherever the quotient is below 2^53',
    async (quadruples) => {
      const fit = quadruples.filter(([a, b, c, d]) => (a * b + c) / d < 2n ** 53n);
      if (fit.length === 0) return;
      const reply = (await redis.eval(wideProbe, 0, ...fit.flat().map(String))) as string[];
      expect(reply.map(BigInt)).toEqual(fit.flatMap(([a, b, c, d]) => [(a * b + c) / d, (a * b + c) % d]));
    },
  );
});
