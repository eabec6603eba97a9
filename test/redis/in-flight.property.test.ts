// Issue 25 over Redis (DESIGN-25 S4): a RedisRateLimiter with `concurrency` decides as its in-memory
// twin, a KeyedRateLimiter of Composite([algorithm(rule), concurrency]) (or Concurrency alone),
// given the same clock readings, under random reserve/settle/cancel/extend/peek/reset/block traces.
import { fc, test } from '@fast-check/vitest';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { Concurrency, ManualClock, Rule } from '../../src/index';
import { type RedisAlgorithm, RedisRateLimiter } from '../../src/redis';
import { redisPort, uniquePrefix, useBothClients } from './helpers/clients';
import { type RedisCluster, startRedisCluster } from './helpers/redis-cluster';
import { inMemoryTwin, perKeyTwin, replay, ruledTraces, traceStep } from '../support/in-flight-twin';
import { algorithmNames } from './helpers/algorithms';

/** The algorithms with leases over Redis (all five), and `undefined` for the in-flight limit alone. */
const leased: (RedisAlgorithm | undefined)[] = ['token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter', undefined];

const traces = fc.record({
  startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
  // Windows of 20 s and more, as the store conformance suite (Redis expires on its own clock); rules
  // past 2^53 too (the wide buckets). Limits below 2^50: the clients round replies near 2^53.
  limit: fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 2 ** 50 })),
  windowMs: fc.oneof(fc.integer({ min: 20_000, max: 200_000 }), fc.integer({ min: 20_000, max: 2 ** 42 })),
  inFlight: fc.integer({ min: 1, max: 5 }),
  leaseMs: fc.integer({ min: 1_000, max: 90_000 }),
  steps: fc.array(traceStep, { minLength: 1, maxLength: 40, size: 'max' }),
});

describe.skipIf(!redisPort)('in-flight limits over Redis equal their in-memory twin', () => {
  const clients: Record<string, unknown> = useBothClients();
  // A key's leases live in its own key, so a cluster runs them as a standalone server does.
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster();
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
    client.on('error', () => {});
    clients['ioredis Cluster'] = client;
  }, 60_000);
  afterAll(async () => {
    (clients['ioredis Cluster'] as Cluster | undefined)?.disconnect();
    await cluster?.stop();
  });
  for (const client of ['ioredis', 'node-redis', 'ioredis Cluster'] as const) {
    for (const algorithm of leased) {
      test.prop([traces], { numRuns: 25 })(`${client}, ${algorithm ?? 'Concurrency alone'}`, async ({ startMs, limit, windowMs, inFlight, leaseMs, steps }) => {
        const rule = new Rule(limit, windowMs);
        const clock = new ManualClock(startMs);
        const { memory, readings } = inMemoryTwin(algorithm, rule, inFlight, leaseMs, clock);
        const concurrency = new Concurrency(inFlight, { leaseMs });
        const prefix = uniquePrefix('in-flight');
        const store =
          algorithm === undefined
            ? new RedisRateLimiter({ client: clients[client] as never, concurrency, onStoreError: 'deny', clock: readings, prefix, timeoutMs: 5_000 })
            : new RedisRateLimiter({ client: clients[client] as never, algorithm, rule, concurrency, onStoreError: 'deny', clock: readings, prefix, timeoutMs: 5_000 });
        const cap = algorithm === undefined ? inFlight : Math.min(limit, inFlight);
        const { fromMemory, fromStore } = await replay(memory, store, steps, cap, clock);
        expect(fromStore).toEqual(fromMemory);
      });
    }
  }

  for (const algorithm of algorithmNames) {
    test.prop([ruledTraces(1_000)], { numRuns: 25 })(`ioredis, ${algorithm}, a rule per key: a lease taken under the key's old rule is settled, cancelled and extended under its new one, as the twin reconfigured per key`, async ({ startMs, rules, inFlight, leaseMs, steps }) => {
      const clock = new ManualClock(startMs);
      const ruleList = rules.map(({ limit, windowMs }) => new Rule(limit, windowMs));
      const { memoryOf, ruleOf, choose, readings } = perKeyTwin(algorithm, ruleList, inFlight, leaseMs, clock);
      const concurrency = new Concurrency(inFlight, { leaseMs });
      const store = new RedisRateLimiter({ client: clients.ioredis as never, algorithm, rule: ruleOf, concurrency, onStoreError: 'deny', clock: readings, prefix: uniquePrefix('in-flight-rules'), timeoutMs: 5_000 });
      const cap = Math.min(inFlight, ...ruleList.map(({ limit }) => limit));
      const { fromMemory, fromStore } = await replay(memoryOf, store, steps, cap, clock, choose);
      expect(fromStore).toEqual(fromMemory);
    });
  }
});
