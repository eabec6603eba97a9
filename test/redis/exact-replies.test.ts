// Redis replies read exactly: numbers near 2^53, and refusals that are never read as grants. The
// full differential suite against the in-memory twins is test/stores/conformance.ts.
import { describe, expect, test } from 'vitest';
import { type Decision, ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useBothClients } from './helpers/clients';

describe.skipIf(!redisPort)('numbers near 2^53 come back exact', () => {
  const clients = useBothClients();
  const limit = Number.MAX_SAFE_INTEGER;
  const half = 2 ** 52 - 1;
  // Odd remainders near 2^53, which both clients' integer decoders rounded; a log whose running
  // totals pass 2^53; refusals waiting on a grant in the middle of the log.
  const steps: [number, number][] = [
    [0, 1],
    [0, 2],
    [0, 3],
    [100, half],
    [100, half],
    [100, 2],
    [500, half],
    [400, half - 7],
    [100, 9],
    [1, 1],
    [600, half],
    [300, 3],
  ];

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    test.each(algorithmNames)(`%s over ${clientName}: a limit of 2^53 - 1 decides as in memory`, async (algorithm) => {
      const rule = new Rule(limit, 1000);
      const clock = new ManualClock(1_700_000_000_000);
      const twin = new twins[algorithm](rule);
      const redis = new RedisRateLimiter({ client: clients[clientName], algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('huge') });
      for (const [moveMs, permits] of steps) {
        clock.advance(moveMs);
        expect(await redis.tryAcquire('k', permits)).toStrictEqual(twin.tryAcquire(clock.now(), permits));
      }
    });
  }
});

describe.skipIf(!redisPort)('a refusal is never read as a grant', () => {
  const clients = useBothClients();

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    test.each(algorithmNames)(`%s over ${clientName}: fractional readings at the edge of a window (issue 17's) refuse, waiting at least 1 ms`, async (algorithm) => {
      const rule = new Rule(1, 1000);
      const clock = new ManualClock(2003.2166);
      const twin = new twins[algorithm](rule);
      const redis = new RedisRateLimiter({ client: clients[clientName], algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('edge') });
      const decisions: Decision[] = [];
      for (const at of [2003.2166, 3003.2165999999997, 3003.2165999999997, 3003.2165999999997, 3003.2165999999997]) {
        clock.set(at);
        const decision = await redis.tryAcquire('k');
        expect(decision).toStrictEqual(twin.tryAcquire(at));
        decisions.push(decision);
      }
      expect(decisions.filter((d) => d.allowed).length).toBeLessThanOrEqual(2);
      for (const d of decisions) if (!d.allowed) expect(d.retryAfterMs).toBeGreaterThanOrEqual(1);
    });
  }
});
