import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { fc, test } from '@fast-check/vitest';
import { GlideClusterClient, Logger } from '@valkey/valkey-glide';
import { afterAll, beforeAll, describe, expect, vi } from 'vitest';
import { typeError } from '../../src/core/errors';
import { Concurrency, KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { type RedisAlgorithm, type RedisClientLike, RedisRateLimiter } from '../../src/redis';
import { toScriptClient } from '../../src/redis/client';
import { PREVIOUS_KEY, plans } from '../../src/redis/scripts';
import { hashSlot } from '../../src/redis/slot';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix } from './helpers/clients';
import { gatedClient, nextMacrotask } from './helpers/gated-client';
import { firstCallForgivesNothing, previousCall, previousKey, upgradeCases } from './helpers/previous-version';
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
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'token-bucket', rule: new Rule(3, 1e12), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    const keys = ['{t0}', '{t1}', '{t2}'].flatMap((tag) => [0, 1, 2, 3].map((i) => `${tag}:user-${i}`));
    // Each key stored already: a key's first call on a cluster takes two more script calls (the
    // previous version's key is read, then the call goes again).
    const first = new RedisRateLimiter({ client: ioredis, algorithm: 'token-bucket', rule: new Rule(3, 1e12), onStoreError: 'deny', prefix });
    for (const key of keys) await first.tryAcquire(key);
    gated.sent.length = 0;
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

  describe("an upgrade forgives nothing on a cluster either: the previous version's key, in another slot, is read by the engine and adopted", () => {
    const clientNames = ['ioredis', 'node-redis', 'GLIDE'] as const;
    let glide: GlideClusterClient;
    const clients = (): Record<(typeof clientNames)[number], RedisClientLike> => ({ ioredis, 'node-redis': nodeRedis, GLIDE: glide });

    beforeAll(async () => {
      // GLIDE logs every server error (NoScriptError included) as a warning by default.
      Logger.setLoggerConfig('off');
      glide = await GlideClusterClient.createClient({ addresses: [{ host: '127.0.0.1', port: cluster.ports[0]! }] });
    });

    afterAll(() => glide?.close());

    for (const algorithm of algorithmNames) {
      test.prop([...upgradeCases, fc.constantFrom(...clientNames)], { numRuns: 15 })(
        `${algorithm}: the first call of a key adopts what the previous version wrote (counts and blocks) as on a server, then the previous key is gone`,
        (rule, steps, pause, first, client) => firstCallForgivesNothing(ioredis, clients()[client], algorithm, rule, steps, pause, first, true),
      );
    }

    test.each(algorithmNames)('%s: two limiters racing on one absent key adopt the previous key once', async (algorithm) => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('cluster-race');
      const rule = new Rule(10, 60_000);
      await previousCall(ioredis, algorithm, rule, previousKey(prefix, algorithm, rule, 'k'), clock.now(), 'acquire', 6);
      const twin = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
      twin.tryAcquire('k', 6);
      const other = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
      try {
        // Both first tries reach the cluster (and find the key absent) before either adoption starts.
        const gates = [gatedClient(toScriptClient(ioredis), { isCluster: true }), gatedClient(toScriptClient(other), { isCluster: true })];
        const [a, b] = gates.map((client) => new RedisRateLimiter({ client, algorithm, rule, onStoreError: 'deny', clock, prefix, timeoutMs: 5_000 }));
        const decisions = [a!.tryAcquire('k'), b!.tryAcquire('k'), a!.tryAcquire('k'), b!.tryAcquire('k'), a!.tryAcquire('k')];
        await nextMacrotask();
        expect(gates.map((gate) => gate.sent.length)).toEqual([1, 1]);
        for (const gate of gates) gate.open();
        const seen = (await Promise.all(decisions)).map(({ allowed, remaining, degraded }) => ({ allowed, remaining, degraded }));
        const expected = decisions.map(() => twin.tryAcquire('k')).map(({ allowed, remaining }) => ({ allowed, remaining, degraded: undefined }));
        // Two processes decide in no set order between them: the same answers, in some order.
        const order = (x: { allowed: boolean; remaining: number }, y: { allowed: boolean; remaining: number }) => Number(y.allowed) - Number(x.allowed) || y.remaining - x.remaining;
        expect(seen.sort(order)).toEqual(expected.sort(order));
        expect(await ioredis.exists(previousKey(prefix, algorithm, rule, 'k'))).toBe(0);
      } finally {
        other.disconnect();
      }
    });

    test.each(algorithmNames)('%s: a foreign value under the previous name is refused, as on a server, and left as it was', async (algorithm) => {
      const prefix = uniquePrefix('cluster-foreign');
      const rule = new Rule(3, 60_000);
      const errors: unknown[] = [];
      const limiter = new RedisRateLimiter({ client: ioredis, algorithm, rule, onStoreError: 'deny', prefix, timeoutMs: 5_000, onError: (error) => errors.push(error) });
      await ioredis.set(previousKey(prefix, algorithm, rule, 'text'), 'what the previous version never wrote');
      await ioredis.rpush(previousKey(prefix, algorithm, rule, 'list'), 'a list');
      for (const key of ['text', 'list']) {
        expect(await limiter.tryAcquire(key)).toMatchObject({ allowed: false, degraded: 'store-error' });
        await expect(limiter.charge(key, 1)).rejects.toThrow(/not a state of this algorithm|not a sliding-window-log key|WRONGTYPE/);
        expect(await ioredis.exists(`${prefix}${algorithm}:${key}`)).toBe(0);
      }
      expect(errors.map(String)).toEqual([expect.stringMatching(/not a state of this algorithm|not a sliding-window-log key|WRONGTYPE/), expect.stringMatching(/WRONGTYPE/)]);
      expect(await ioredis.get(previousKey(prefix, algorithm, rule, 'text'))).toBe('what the previous version never wrote');
      expect(await ioredis.lrange(previousKey(prefix, algorithm, rule, 'list'), 0, -1)).toEqual(['a list']);
    });

    test.each(algorithmNames)('%s: a reset removes the key and the previous one, written again meanwhile by a process not yet upgraded', async (algorithm) => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('cluster-reset');
      const rule = new Rule(5, 60_000);
      const previous = previousKey(prefix, algorithm, rule, 'k');
      const limiter = new RedisRateLimiter({ client: ioredis, algorithm, rule, onStoreError: 'deny', clock, prefix, timeoutMs: 5_000 });
      await previousCall(ioredis, algorithm, rule, previous, clock.now(), 'acquire', 3);
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
      await previousCall(ioredis, algorithm, rule, previous, clock.now(), 'acquire', 2);
      await limiter.reset('k');
      expect(await ioredis.exists(previous)).toBe(0);
      expect(await ioredis.exists(`${prefix}${algorithm}:k`)).toBe(0);
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 4 });
    });

    test.each(algorithmNames)('%s: a limiter with an in-flight limit adopts the previous key too, on its first reservation', async (algorithm) => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('cluster-leased');
      const rule = new Rule(5, 60_000);
      const previous = previousKey(prefix, algorithm, rule, 'k');
      await previousCall(ioredis, algorithm, rule, previous, clock.now(), 'acquire', 3);
      const limiter = new RedisRateLimiter({ client: ioredis, algorithm, rule, concurrency: new Concurrency(4, { leaseMs: 60_000 }), onStoreError: 'deny', clock, prefix, timeoutMs: 5_000 });
      const first = await limiter.reserve('k');
      expect(first.decision).toMatchObject({ allowed: true, remaining: 1 });
      expect(first.decision.degraded).toBeUndefined();
      expect(await ioredis.exists(previous)).toBe(0);
      expect((await limiter.reserve('k')).decision).toMatchObject({ allowed: true, remaining: 0 });
      const refused = (await limiter.reserve('k')).decision;
      expect(refused).toMatchObject({ allowed: false, remaining: 0 });
      expect(refused.degraded).toBeUndefined();
    });

    /**
     * 40 calls in one tick on a fresh key, over a client `ordered` or not: they decide as in memory;
     * the script calls' sizes are returned.
     */
    async function callsOnAFreshKey(algorithm: RedisAlgorithm, ordered: boolean): Promise<number[]> {
      const clock = new ManualClock(1_700_000_000_000);
      const rule = new Rule(30, 60_000);
      // Every node holds the scripts already: no NOSCRIPT reply sends one again.
      for (const node of ioredis.nodes('master')) for (const { source } of [plans[algorithm].script, PREVIOUS_KEY]) await node.script('LOAD', source);
      const recorded = gatedClient(toScriptClient(ioredis), { isCluster: true, ordered });
      recorded.open();
      const limiter = new RedisRateLimiter({ client: recorded, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('cluster-waited'), timeoutMs: 5_000 });
      const twin = new twins[algorithm](rule);
      const expected = [];
      const decisions = [];
      for (let i = 0; i < 40; i++) {
        clock.advance(i % 3);
        expected.push(twin.tryAcquire(clock.now(), 1));
        decisions.push(limiter.tryAcquire('k'));
      }
      expect(await Promise.all(decisions)).toStrictEqual(expected);
      return recorded.sent.map((keys) => keys.length);
    }

    // Three batches find the key absent, the first call adopts (a read, a second try), and the 39
    // that waited go as batches again, not as 39 script calls at once (a client need not keep so
    // many in order: GLIDE ran a hundred in another order).
    test.each(algorithmNames)('%s: the calls that waited for an adoption go in order as batches of 16', async (algorithm) => {
      expect(await callsOnAFreshKey(algorithm, true)).toEqual([16, 16, 8, 1, 1, 16, 16, 7]);
    });

    // Over a client that is not `ordered` (GLIDE): one script call on the key at a time. The two
    // batches queued behind the first, which found the key absent, wait for the adoption too
    // instead of deciding before the calls that waited for it.
    test.each(algorithmNames)('%s: over a client that is not ordered, the calls held behind the first batch wait for its adoption, then go in order one batch at a time', async (algorithm) => {
      expect(await callsOnAFreshKey(algorithm, false)).toEqual([16, 1, 1, 16, 16, 7]);
    });

    test('a read of the previous key that never comes back is bounded by timeoutMs, and holds the next call on the key back no longer', async () => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('cluster-stall');
      const rule = new Rule(5, 60_000);
      await previousCall(ioredis, 'fixed-window', rule, previousKey(prefix, 'fixed-window', rule, 'k'), clock.now(), 'acquire', 3);
      const inner = toScriptClient(ioredis);
      let stall = true;
      let stalled = 0;
      // Only the read of the previous key stalls.
      const stalls = (keys: string[]) => stall && keys[0] === previousKey(prefix, 'fixed-window', rule, 'k') && ++stalled > 0;
      const limiter = new RedisRateLimiter({
        client: {
          isCluster: true,
          ordered: true,
          evalsha: (sha1: string, keys: string[], args: string[]) => (stalls(keys) ? new Promise(() => {}) : inner.evalsha(sha1, keys, args)),
          eval: (source: string, keys: string[], args: string[]) => (stalls(keys) ? new Promise(() => {}) : inner.eval(source, keys, args)),
        } as RedisClientLike,
        algorithm: 'fixed-window',
        rule,
        onStoreError: 'deny',
        clock,
        prefix,
        timeoutMs: 300,
      });
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      try {
        const first = limiter.tryAcquire('k');
        // Its first try comes back absent while no fake time passes; then its read stalls.
        while (stalled === 0) await nextMacrotask();
        await vi.advanceTimersByTimeAsync(150);
        const behind = limiter.tryAcquire('k');
        stall = false;
        await vi.advanceTimersByTimeAsync(150);
        expect(await first).toMatchObject({ allowed: false, degraded: 'store-timeout' });
        // Nothing of the stalled call was spent: the next adopts the 3 of 5 the previous version counted.
        const adopted = await behind;
        expect(adopted).toMatchObject({ allowed: true, remaining: 1 });
        expect(adopted.degraded).toBeUndefined();
        expect(stalled).toBe(1);
      } finally {
        vi.useRealTimers();
      }
    });
  });
});
