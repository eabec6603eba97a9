import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { typeError } from '../../src/core/errors';
import { Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { toScriptClient } from '../../src/redis/client';
import { hashSlot } from '../../src/redis/slot';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix } from './helpers/clients';
import { gatedClient, nextMacrotask } from './helpers/gated-client';
import { type RedisCluster, startRedisCluster } from './helpers/redis-cluster';

// Keys that would break a layout spreading one decision over several keys: hash tags anywhere,
// unbalanced braces, unicode, a NUL, and a very long key.
const awkwardKeys = ['{', '}', '{}', '}{', '{user}:1', 'a{b}c{d}', '{{x}}', 'ключ-🚀-鍵', 'nul\u0000byte', 'x'.repeat(10_000), ''];

describe.skipIf(!redisPort)('Redis Cluster: batches of one hash slot, so no CROSSSLOT whatever the keys', { timeout: 60_000 }, () => {
  let cluster: RedisCluster;
  let ioredis: Cluster;
  let nodeRedis: ReturnType<typeof createCluster>;

  beforeAll(async () => {
    cluster = await startRedisCluster();
    const nodes = cluster.ports.map((port) => ({ host: '127.0.0.1', port }));
    ioredis = new Cluster(nodes);
    nodeRedis = createCluster({ rootNodes: cluster.ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
  }, 60_000);

  afterAll(async () => {
    ioredis?.disconnect();
    await nodeRedis?.destroy();
    await cluster?.stop();
  });

  test.each(algorithmNames)('%s: awkward keys work with ioredis and node-redis sharing each key', async (algorithm) => {
    const prefix = uniquePrefix('cluster');
    const viaIoredis = new RedisRateLimiter({ client: ioredis, algorithm, rule: new Rule(3, 1e12), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    const viaNodeRedis = new RedisRateLimiter({ client: nodeRedis, algorithm, rule: new Rule(3, 1e12), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    for (const key of awkwardKeys) {
      const decisions = [
        await viaIoredis.tryAcquire(key),
        await viaNodeRedis.tryAcquire(key),
        await viaIoredis.tryAcquire(key),
        await viaNodeRedis.tryAcquire(key),
      ];
      expect(decisions.map(({ allowed, remaining, degraded }) => ({ allowed, remaining, degraded }))).toEqual([
        { allowed: true, remaining: 2, degraded: undefined },
        { allowed: true, remaining: 1, degraded: undefined },
        { allowed: true, remaining: 0, degraded: undefined },
        { allowed: false, remaining: 0, degraded: undefined },
      ]);
    }
  });

  test('keys spread over the masters: the cluster really routes by key', async () => {
    const limiter = new RedisRateLimiter({ client: ioredis, algorithm: 'token-bucket', rule: Rule.perMinute(5), onStoreError: 'deny', prefix: uniquePrefix('spread') });
    for (let i = 0; i < 30; i++) expect((await limiter.tryAcquire(`user-${i}`)).degraded).toBeUndefined();
    const sizes = await Promise.all(ioredis.nodes('master').map((node) => node.dbsize()));
    expect(sizes.filter((size) => size > 0).length).toBe(3);
  });

  test('hashSlot places every key as the cluster does (CLUSTER KEYSLOT)', async () => {
    for (const key of [...awkwardKeys, 'user-1', '{tenant-7}:user-1', 'a{}b{c}', '\u{1F680}{\u{1F680}}', 'x\uD800y']) {
      expect(hashSlot(key)).toBe(await ioredis.cluster('KEYSLOT', key));
    }
  });

  test.each(algorithmNames)('%s: many keys at once, batched by slot over both clients: exact, never degraded', async (algorithm) => {
    const prefix = uniquePrefix('cluster-batch');
    for (const client of [ioredis, nodeRedis]) {
      const limiter = new RedisRateLimiter({ client, algorithm, rule: new Rule(2, 1e12), onStoreError: 'deny', prefix: `${prefix}${client === ioredis ? 'io' : 'node'}:`, timeoutMs: 5_000 });
      const keys = [...awkwardKeys, ...Array.from({ length: 60 }, (_, i) => `user-${i % 30}`)];
      const decisions = await Promise.all([...keys, ...keys].map((key) => limiter.tryAcquire(key)));
      expect(decisions.filter((decision) => decision.degraded !== undefined)).toEqual([]);
      const allowed = new Map<string, number>();
      [...keys, ...keys].forEach((key, i) => allowed.set(key, (allowed.get(key) ?? 0) + (decisions[i]!.allowed ? 1 : 0)));
      expect(new Set(allowed.values())).toEqual(new Set([2]));
    }
  });

  test.each(['app:', '{app}:', 'ключ:'])("%s as ioredis's keyPrefix: batches are grouped by the slot of the key the server sees, so never CROSSSLOT", async (keyPrefix) => {
    const prefixed = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { keyPrefix });
    try {
      for (const algorithm of algorithmNames) {
        const errors: unknown[] = [];
        const prefix = uniquePrefix('key-prefix');
        const limiter = new RedisRateLimiter({ client: prefixed, algorithm, rule: new Rule(2, 1e12), onStoreError: 'allow', prefix, timeoutMs: 5_000, onError: (error) => errors.push(error) });
        // Keys that share a slot without ioredis's prefix, and so would be batched together were
        // slots computed on the limiter's own keys.
        const bySlot = new Map<number, string[]>();
        for (let i = 0; i < 3_000; i++) {
          // Random, not user-1, user-2...: CRC16 never maps keys of one length that differ in a few bits to one slot.
          const key = `user-${Math.random().toString(36).slice(2)}`;
          const slot = hashSlot(`${prefix}${algorithm}:${key}`);
          bySlot.set(slot, [...(bySlot.get(slot) ?? []), key]);
        }
        const keys = [...bySlot.values()].filter((same) => same.length > 1).flat();
        expect(keys.length).toBeGreaterThan(20);
        const decisions = await Promise.all([...keys, ...keys, ...keys].map((key) => limiter.tryAcquire(key)));
        expect(errors).toEqual([]);
        expect(decisions.filter((decision) => decision.allowed)).toHaveLength(2 * keys.length);
        // The keys really carry ioredis's prefix.
        expect(await ioredis.exists(`${keyPrefix}${prefix}${algorithm}:${keys[0]}`)).toBe(1);
      }
    } finally {
      prefixed.disconnect();
    }
  });

  test("a Buffer keyPrefix, whose slots cannot be computed, is refused by the constructor", () => {
    const buffered = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { keyPrefix: Buffer.from('app:') as unknown as string, lazyConnect: true });
    expect(() => new RedisRateLimiter({ client: buffered, algorithm: 'fixed-window', rule: Rule.perSecond(1), onStoreError: 'deny' })).toThrow(
      typeError("ratekeeper: the client's `keyPrefix` must be a string to compute hash slots, got an object; use RedisRateLimiter's `prefix` instead"),
    );
    buffered.disconnect();
  });

  test('calls arriving one per macrotask while one is in flight go in the next round, one batch per hash slot', async () => {
    const gated = gatedClient(toScriptClient(ioredis), { isCluster: true });
    const prefix = uniquePrefix('cluster-across');
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'token-bucket', rule: new Rule(2, 1e12), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    const keys = ['{t0}', '{t1}', '{t2}'].flatMap((tag) => [0, 1, 2, 3].map((i) => `${tag}:user-${i}`));
    const calls = [...keys, ...keys, ...keys];
    const decisions = [];
    for (const key of calls) {
      decisions.push(limiter.tryAcquire(key));
      await nextMacrotask();
    }
    expect(gated.sent).toHaveLength(1);
    gated.open();
    const allowed = (await Promise.all(decisions)).map(({ allowed, degraded }) => ({ allowed, degraded }));
    expect(allowed).toEqual(calls.map((_, i) => ({ allowed: i < 2 * keys.length, degraded: undefined })));
    const slots = gated.sent.map((batch) => new Set(batch.map(hashSlot)));
    expect(slots.every((slot) => slot.size === 1)).toBe(true);
    expect(gated.sent.map((batch) => batch.length)).toEqual([1, 11, 12, 12]);
  });

  test.each(algorithmNames)("%s: the previous version's key, in another slot, is left alone (its counts are forgiven once, see docs/redis.md), and nothing fails", async (algorithm) => {
    const prefix = uniquePrefix('cluster-upgrade');
    const rule = new Rule(3, 60_000);
    const limiter = new RedisRateLimiter({ client: ioredis, algorithm, rule, onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    const previous = `${prefix}${algorithm}:3/60000:k`;
    await ioredis.set(previous, 'what the previous version wrote');
    expect(hashSlot(previous)).not.toBe(hashSlot(`${prefix}${algorithm}:k`));
    const decided = await limiter.tryAcquire('k');
    expect(decided).toMatchObject({ allowed: true, remaining: 2 });
    expect(decided.degraded).toBeUndefined();
    const peeked = await limiter.peek('k', 0);
    expect(peeked).toMatchObject({ remaining: 2 });
    expect(peeked.degraded).toBeUndefined();
    await limiter.reset('k');
    expect(await ioredis.get(previous)).toBe('what the previous version wrote');
  });
});
