import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { type Decision, ManualClock, type RateLimitAlgorithm, Rule } from '../../src/index';
import { type RedisAlgorithm, type RedisClientLike, RedisRateLimiter } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useBothClients } from './helpers/clients';

// Redis expires keys on its own clock while a ManualClock jumps; windows of 20 s and more keep
// every key's expiry (at least windowMs / limit, or 1 s for the fixed window, see below) far beyond
// the few real milliseconds a trace takes.
const rules = fc
  .record({
    limit: fc.integer({ min: 1, max: 20 }),
    windowMs: fc.integer({ min: 20_000, max: 200_000 }),
  })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

// Rules whose limit × windowMs passes 2^53, up to the ends of the Rule domain: the scripts' wide
// arithmetic must decide them as the in-memory algorithms do. Limits stay below 2^50 here: the
// clients' reply decoders round integers near 2^53 (issue 17 item 11, on the Redis branch).
const hugeRules = fc
  .record({
    limit: fc.oneof(fc.constantFrom(1_000_000_000, 100_000_000, 999_999_999_989, 2 ** 50 - 1), fc.integer({ min: 1, max: 2 ** 50 })),
    windowMs: fc.oneof(fc.constantFrom(86_400_000, 604_800_000, 3_600_000, Rule.MAX_WINDOW_MS), fc.integer({ min: 20_000, max: Rule.MAX_WINDOW_MS })),
  })
  .filter(({ limit, windowMs }) => limit * windowMs > Number.MAX_SAFE_INTEGER)
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

const step = fc.record({
  // Mostly small moves, sometimes a window or two, sometimes backwards; quarters of a ms too.
  moveMs: fc.oneof(
    fc.constant(0),
    fc.integer({ min: 1, max: 3_000 }),
    fc.integer({ min: 0, max: 400_000 }),
    fc.integer({ min: -5_000, max: -1 }),
    fc.integer({ min: -4_000, max: 4_000 }).map((q) => q / 4),
    fc.integer({ min: 0, max: 2 ** 43 }),
  ),
  key: fc.constantFrom('a', 'b', 'c'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
});

const traces = fc.record({
  startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
  steps: fc.array(step, { minLength: 1, maxLength: 30, size: 'max' }),
});

// Long enough to span several batches (at most 32 decisions go in one script call).
const longTraces = fc.record({
  startMs: traces.map((trace) => trace.startMs),
  steps: fc.array(step, { minLength: 1, maxLength: 100, size: 'max' }), // 'max': fast-check would stop near 10
});

/** How many runs each property gets; RATEKEEPER_NUM_RUNS raises it for a long local soak. */
const numRuns = Number(process.env.RATEKEEPER_NUM_RUNS ?? 100);

/** Keeps a fixed-window reading out of the last second of its window (moving it to the boundary), so no key lives less than 1 s. */
function awayFromWindowEnd(nowMs: number, windowMs: number): number {
  const end = (Math.floor(nowMs / windowMs) + 1) * windowMs;
  return end - nowMs < 1_000 ? end : nowMs;
}

type Trace = { startMs: number; steps: { moveMs: number; key: string; share: number }[] };

/**
 * Walks a trace: the in-memory twin decides each step at once; Redis is asked either one call at a
 * time, each awaited before the clock moves on, or all in one tick, the ManualClock moving between
 * calls, so that one batch carries a different reading per call.
 */
async function replay(client: RedisClientLike, algorithm: RedisAlgorithm, rule: Rule, trace: Trace, oneTick: boolean) {
  const clock = new ManualClock(trace.startMs);
  // One algorithm per key, never forgotten: a keyed limiter may forget a key that is idle at a
  // later reading, which a backwards step would then expose.
  const memory = new Map<string, RateLimitAlgorithm>();
  const redis = new RedisRateLimiter({ client, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('same') });
  const fromMemory: Decision[] = [];
  const fromRedis: Promise<Decision>[] = [];
  for (const { moveMs, key, share } of trace.steps) {
    const nowMs = clock.now() + moveMs;
    clock.set(algorithm === 'fixed-window' ? awayFromWindowEnd(nowMs, rule.windowMs) : nowMs);
    const permits = 1 + Math.floor(share * (rule.limit - 1));
    if (!memory.has(key)) memory.set(key, new twins[algorithm](rule));
    fromMemory.push(memory.get(key)!.tryAcquire(clock.now(), permits));
    const decision = redis.tryAcquire(key, permits);
    if (!oneTick) await decision;
    fromRedis.push(decision);
  }
  return { fromMemory, fromRedis: await Promise.all(fromRedis) };
}

describe.skipIf(!redisPort)('RedisRateLimiter decides exactly as in memory', () => {
  const clients = useBothClients();

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    for (const algorithm of algorithmNames) {
      test.prop([rules, traces], { numRuns })(`${algorithm} over ${clientName}: same clock readings, same decisions`, async (rule, trace) => {
        const { fromMemory, fromRedis } = await replay(clients[clientName], algorithm, rule, trace, false);
        expect(fromRedis).toStrictEqual(fromMemory);
      });

      // The log stores one entry per permit until it is stored per grant (issue 17 item 5, on the
      // Redis branch): huge requests would not fit in memory. Its arithmetic is sums of times.
      if (algorithm !== 'sliding-window-log') {
        test.prop([hugeRules, traces], { numRuns })(`${algorithm} over ${clientName}: rules past 2^53 decide as in memory`, async (rule, trace) => {
          const { fromMemory, fromRedis } = await replay(clients[clientName], algorithm, rule, trace, false);
          expect(fromRedis).toStrictEqual(fromMemory);
        });
      }

      test.prop([rules, longTraces], { numRuns })(
        `${algorithm} over ${clientName}: a whole trace asked for in one tick (batched) decides as the same calls one by one`,
        async (rule, trace) => {
          const { fromMemory, fromRedis } = await replay(clients[clientName], algorithm, rule, trace, true);
          expect(fromRedis).toStrictEqual(fromMemory);
        },
      );
    }
  }
});
