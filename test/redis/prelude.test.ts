import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { ceilDiv, floorDiv } from '../../src/core/exact';
import { CEIL_DIV, FLOOR_DIV, PRELUDE } from '../../src/redis/lua/prelude';
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
