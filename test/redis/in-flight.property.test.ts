// Issue 25 over Redis (DESIGN-25 S4): a RedisRateLimiter with `concurrency` decides as its in-memory
// twin, a KeyedRateLimiter of Composite([algorithm(rule), concurrency]) (or Concurrency alone),
// given the same clock readings, under random reserve/settle/cancel/extend/peek/reset/block traces.
import { fc, test } from '@fast-check/vitest';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { type AsyncLease, type Clock, Composite, Concurrency, KeyedRateLimiter, type Lease, ManualClock, type PeekableAlgorithm, Rule } from '../../src/index';
import { type RedisAlgorithm, RedisRateLimiter } from '../../src/redis';
import { twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useBothClients } from './helpers/clients';
import { type RedisCluster, startRedisCluster } from './helpers/redis-cluster';

/** The algorithms with leases over Redis (all five), and `undefined` for the in-flight limit alone. */
const leased: (RedisAlgorithm | undefined)[] = ['token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter', undefined];

const steps = fc.record({
  // Mostly small moves, some past a lease or a window, some backwards (the store reads the latest).
  moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 0, max: 120_000 }), fc.integer({ min: -2_000, max: -1 }), fc.integer({ min: -4_000, max: 4_000 }).map((q) => q / 4)),
  key: fc.constantFrom('a', 'b'),
  op: fc.constantFrom('reserve', 'reserve', 'reserve', 'settle', 'settle', 'cancel', 'extend', 'extend', 'peek', 'peek0', 'reset', 'block', 'again'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
  ms: fc.oneof(fc.integer({ min: 1, max: 100_000 }), fc.constant(2 ** 42)),
});
const traces = fc.record({
  startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
  // Windows of 20 s and more, as the store conformance suite (Redis expires on its own clock); rules
  // past 2^53 too (the wide buckets). Limits below 2^50: the clients round replies near 2^53.
  limit: fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 2 ** 50 })),
  windowMs: fc.oneof(fc.integer({ min: 20_000, max: 200_000 }), fc.integer({ min: 20_000, max: 2 ** 42 })),
  inFlight: fc.integer({ min: 1, max: 5 }),
  leaseMs: fc.integer({ min: 1_000, max: 90_000 }),
  steps: fc.array(steps, { minLength: 1, maxLength: 40, size: 'max' }),
});

/** A settled promise as a value, so that the same failure on both sides compares equal. */
async function outcome(call: () => unknown): Promise<unknown> {
  try {
    const value = await call();
    return value === undefined ? 'done' : value;
  } catch (error) {
    return { failed: (error as { code?: string }).code ?? String(error) };
  }
}

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
        let latest = -Infinity;
        const readings: Clock = { now: () => (latest = Math.max(latest, clock.now())) };
        const concurrency = new Concurrency(inFlight, { leaseMs });
        const memory = new KeyedRateLimiter({
          algorithm: () => (algorithm === undefined ? new Concurrency(inFlight, { leaseMs }) : new Composite([new twins[algorithm](rule) as PeekableAlgorithm, new Concurrency(inFlight, { leaseMs })])),
          clock,
        });
        const prefix = uniquePrefix('in-flight');
        const store =
          algorithm === undefined
            ? new RedisRateLimiter({ client: clients[client] as never, concurrency, onStoreError: 'deny', clock: readings, prefix, timeoutMs: 5_000 })
            : new RedisRateLimiter({ client: clients[client] as never, algorithm, rule, concurrency, onStoreError: 'deny', clock: readings, prefix, timeoutMs: 5_000 });
        const cap = algorithm === undefined ? inFlight : Math.min(limit, inFlight);
        const leases: { memory: Lease; store: AsyncLease; permits: number }[] = [];
        const fromMemory: unknown[] = [];
        const fromStore: unknown[] = [];
        const both = async (inMemory: () => unknown, inStore: () => unknown) => {
          fromMemory.push(await outcome(inMemory));
          fromStore.push(await outcome(inStore));
        };
        for (const { moveMs, key, op, share, pick, ms } of steps) {
          clock.set(clock.now() + moveMs);
          const permits = 1 + Math.floor(share * (cap - 1));
          const lease = leases.length === 0 ? undefined : leases[pick % leases.length]!;
          if (op === 'reserve') {
            const inMemory = memory.reserve(key, permits) as Lease;
            const inStore = (await store.reserve(key, permits)) as AsyncLease;
            fromMemory.push(inMemory.decision);
            fromStore.push(inStore.decision);
            if (inMemory.decision.allowed && inStore.decision.allowed) leases.push({ memory: inMemory, store: inStore, permits });
          } else if (op === 'peek') await both(() => memory.peek(key, permits), () => store.peek(key, permits));
          else if (op === 'peek0') await both(() => memory.peek(key, 0), () => store.peek(key, 0));
          else if (op === 'reset') await both(() => memory.reset(key), () => store.reset(key));
          else if (op === 'block') await both(() => memory.block(key, ms), () => store.block(key, ms));
          else if (lease !== undefined) {
            const actual = Math.floor(share * 2 * lease.permits);
            if (op === 'extend') await both(() => lease.memory.extend(ms), () => lease.store.extend(ms));
            else if (op === 'cancel') await both(() => lease.memory.cancel(), () => lease.store.cancel());
            else await both(() => lease.memory.settle(actual), () => lease.store.settle(actual));
          }
        }
        for (const key of ['a', 'b']) await both(() => memory.peek(key, 0), () => store.peek(key, 0));
        expect(fromStore).toEqual(fromMemory);
      });
    }
  }
});
