// src/redis/coalescer.ts and batch-sender.ts, through RedisRateLimiter: the calls of one tick share
// one script call, calls arriving while one is in flight share the next, and each still gets its
// own answer, its own policy decision, its own bound.
import { describe, expect, test, vi } from 'vitest';
import { type Decision, KeyedRateLimiter, Rule, TokenBucket } from '../../src/index';
import { RedisRateLimiter, RedisTimeoutError } from '../../src/redis';
import { toScriptClient } from '../../src/redis/client';
import { algorithmNames } from './helpers/algorithms';
import { useBothClients, useIoredis, redisPort, uniquePrefix } from './helpers/clients';
import { countingClient } from './helpers/counting-client';
import { gatedClient, nextMacrotask } from './helpers/gated-client';

const rule = new Rule(4, 1e12);
/** As docs/redis.md states: at most 16 decisions a script call. */
const BATCH = 16;

describe.skipIf(!redisPort)('batching', () => {
  const redis = useIoredis();

  test('the calls of one tick go in one EVALSHA, at most 16 to a call; with batch: false, one each', async () => {
    const batched = countingClient(redis);
    const unbatched = countingClient(redis);
    const prefix = uniquePrefix('tick');
    const limiter = new RedisRateLimiter({ client: batched, algorithm: 'fixed-window', rule, onStoreError: 'deny', prefix });
    const single = new RedisRateLimiter({ client: unbatched, algorithm: 'fixed-window', rule, onStoreError: 'deny', prefix, batch: false });
    await limiter.tryAcquire('warm');
    await single.tryAcquire('warm');
    batched.sent.length = 0;
    unbatched.sent.length = 0;
    await Promise.all(Array.from({ length: 10 }, (_, i) => limiter.tryAcquire(`user-${i}`)));
    expect(batched.sent).toEqual(['EVALSHA']);
    await Promise.all(Array.from({ length: 100 }, (_, i) => limiter.tryAcquire(`user-${i}`)));
    expect(batched.sent).toHaveLength(1 + Math.ceil(100 / BATCH));
    await Promise.all(Array.from({ length: 10 }, (_, i) => single.tryAcquire(`other-${i}`)));
    expect(unbatched.sent).toHaveLength(10);
  });

  test('calls on one key in one batch decide in the order made, as one by one would', async () => {
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'sliding-window-log', rule, onStoreError: 'deny', prefix: uniquePrefix('order') });
    const decisions = await Promise.all([1, 2, 1, 1, 3].map((permits) => limiter.tryAcquire('k', permits)));
    expect(decisions.map(({ allowed, remaining }) => [allowed, remaining])).toEqual([
      [true, 3],
      [true, 1],
      [true, 0],
      [false, 0],
      [false, 0],
    ]);
  });

  describe('a key holding a foreign value fails its own decision only; the others of its batch decide normally', () => {
    const clients = useBothClients();
    /** Values a key under the prefix may hold that no script of this algorithm wrote. */
    const foreign: [string, (key: string) => Promise<unknown>][] = [
      ['a list', (key) => redis.rpush(key, 'not a state')],
      ['a hash', (key) => redis.hset(key, 'field', 'value')],
      ['a set', (key) => redis.sadd(key, 'member')],
      ['a string of the wrong size', (key) => redis.set(key, 'seven b')],
      ['a sorted set of foreign members', (key) => redis.zadd(key, 1, 'someone else')],
    ];
    for (const clientName of ['ioredis', 'node-redis'] as const) {
      test.for(algorithmNames.flatMap((algorithm) => foreign.map(([what, write]) => [algorithm, what, write] as const)))(
        `%s over ${clientName}: %s`,
        async ([algorithm, , write]) => {
          const prefix = uniquePrefix('foreign');
          const errors: [unknown, string][] = [];
          const options = { algorithm, rule: new Rule(2, 1e12), prefix } as const;
          const limiter = new RedisRateLimiter({ ...options, client: clients[clientName], onStoreError: 'allow', onError: (error, key) => errors.push([error, key]) });
          const twin = new RedisRateLimiter({ ...options, client: clients[clientName], onStoreError: 'deny', prefix: `${prefix}twin:` });
          // alice is exhausted first, so that an 'allow' answer for her would show.
          await limiter.tryAcquire('alice', 2);
          await twin.tryAcquire('alice', 2);
          const broken = `${prefix}${algorithm}:broken`;
          await write(broken);
          const calls = ['alice', 'bob', 'broken', 'carol', 'bob'];
          const decisions = await Promise.all(calls.map((key) => limiter.tryAcquire(key)));
          const expected = await Promise.all(calls.map((key) => twin.tryAcquire(key)));
          const strip = (d: Decision) => ({ allowed: d.allowed, remaining: d.remaining, degraded: d.degraded });
          expect(decisions.map(strip)).toEqual([
            strip(expected[0]!),
            strip(expected[1]!),
            // Through the outage policy, as when Redis fails: 'allow' here.
            { allowed: true, remaining: 1, degraded: 'store-error' },
            strip(expected[3]!),
            strip(expected[4]!),
          ]);
          expect(decisions.filter((d) => d.degraded !== undefined)).toHaveLength(1);
          expect(errors).toEqual([[expect.objectContaining({ message: expect.stringMatching(/^ratekeeper: Redis failed on this key: /) }), 'broken']]);
          // The failed decision wrote nothing: the foreign value is still there, untouched.
          expect(await redis.type(broken)).not.toBe('none');
        },
      );
    }
  });

  test('a batch that gets no answer times out as a whole: every call gets store-timeout within its bound', async () => {
    const errors: unknown[] = [];
    const limiter = new RedisRateLimiter({
      client: { evalsha: () => new Promise(() => {}), eval: () => new Promise(() => {}) },
      algorithm: 'token-bucket',
      rule,
      onStoreError: 'deny',
      timeoutMs: 50,
      onError: (error) => errors.push(error),
    });
    const started = performance.now();
    const decisions = await Promise.all(['a', 'b', 'a'].map((key) => limiter.tryAcquire(key)));
    expect(performance.now() - started).toBeGreaterThanOrEqual(49);
    expect(decisions.map((decision) => decision.degraded)).toEqual(['store-timeout', 'store-timeout', 'store-timeout']);
    expect(errors).toEqual([expect.any(RedisTimeoutError), expect.any(RedisTimeoutError), expect.any(RedisTimeoutError)]);
  });

  test('an adapter that throws instead of rejecting fails the batch, not the caller', async () => {
    const limiter = new RedisRateLimiter({
      client: {
        evalsha: () => {
          throw new Error('adapter bug');
        },
        eval: () => Promise.resolve(null),
      },
      algorithm: 'fixed-window',
      rule,
      onStoreError: 'deny',
    });
    const decisions = await Promise.all([limiter.tryAcquire('a'), limiter.tryAcquire('b')]);
    expect(decisions.map((decision) => decision.degraded)).toEqual(['store-error', 'store-error']);
  });

  test('a fallback limiter that throws (a cost above its own limit) answers that call as deny would, and onError hears why', async () => {
    const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) });
    const errors: [string, string][] = [];
    const limiter = new RedisRateLimiter({
      client: { evalsha: () => Promise.reject(new Error('down')), eval: () => Promise.reject(new Error('down')) },
      algorithm: 'token-bucket',
      rule,
      onStoreError: fallback,
      onError: (error, key) => errors.push([String(error), key]),
    });
    const [small, large] = await Promise.all([limiter.tryAcquire('a', 1), limiter.tryAcquire('b', 3)]);
    expect(small).toMatchObject({ allowed: true, limit: 2, degraded: 'store-error' });
    expect(large).toStrictEqual({ allowed: false, limit: 4, remaining: 0, retryAfterMs: 750_000_000_000, resetAfterMs: 1e12, degraded: 'store-error' });
    expect(errors).toEqual([
      ['Error: down', 'a'],
      ['Error: down', 'b'],
      ['RangeError: ratekeeper: `permits` must be an integer from 1 to 2, got 3', 'b'],
    ]);
  });

  /** A call on 'first' whose reply is held, then `count` calls on new keys, one per macrotask. */
  async function heldFirstThenOnePerMacrotask(count: number) {
    const gated = gatedClient(toScriptClient(redis));
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'fixed-window', rule, onStoreError: 'deny', prefix: uniquePrefix('across') });
    const decisions = [limiter.tryAcquire('first')];
    for (let i = 0; i < count; i++) {
      await nextMacrotask();
      decisions.push(limiter.tryAcquire(`user-${i}`));
    }
    return { gated, decisions };
  }

  test('a call that finds nothing in flight goes at once, alone: a quiet server gets no added wait', async () => {
    const gated = gatedClient(toScriptClient(redis));
    gated.open();
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'token-bucket', rule, onStoreError: 'deny', prefix: uniquePrefix('alone') });
    for (let i = 0; i < 5; i++) {
      await nextMacrotask();
      const decision = limiter.tryAcquire(`user-${i}`);
      // Sent before the next macrotask, with no timer: within the microtasks of its own tick.
      await Promise.resolve();
      expect(gated.sent).toHaveLength(i + 1);
      expect((await decision).allowed).toBe(true);
    }
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, 1, 1, 1, 1]);
  });

  test('calls arriving one per macrotask while a call is in flight go together in the next script call', async () => {
    const { gated, decisions } = await heldFirstThenOnePerMacrotask(10);
    expect(gated.sent).toEqual([['first'].map((key) => expect.stringMatching(new RegExp(`:${key}$`)))]);
    gated.open();
    expect((await Promise.all(decisions)).map(({ allowed, degraded }) => ({ allowed, degraded }))).toEqual(
      Array.from({ length: 11 }, () => ({ allowed: true, degraded: undefined })),
    );
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, 10]);
  });

  test('a batch that fills up while a round is in flight goes at once; the rest wait for the round', async () => {
    const { gated, decisions } = await heldFirstThenOnePerMacrotask(40);
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, BATCH, BATCH]);
    gated.open();
    expect((await Promise.all(decisions)).every(({ allowed, degraded }) => allowed && degraded === undefined)).toBe(true);
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, BATCH, BATCH, 40 - 2 * BATCH]);
  });

  test('over a client that may run requests in any order (no `ordered`), a full batch waits for the round like the rest', async () => {
    const gated = gatedClient(toScriptClient(redis), { ordered: false });
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'fixed-window', rule: new Rule(40, 1e12), onStoreError: 'deny', prefix: uniquePrefix('unordered') });
    const decisions = [];
    for (let i = 0; i < 40; i++) {
      decisions.push(limiter.tryAcquire(`k${i % 2}`));
      await nextMacrotask();
    }
    // Nothing went beside the first call, not even a full batch: sent apart, it could run first.
    expect(gated.sent.map((keys) => keys.length)).toEqual([1]);
    gated.open();
    expect((await Promise.all(decisions)).map(({ remaining }) => remaining)).toEqual(Array.from({ length: 40 }, (_, i) => 40 - 1 - (i >> 1)));
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, BATCH, BATCH, 40 - 1 - 2 * BATCH]);
  });

  test('over a client that is not `ordered`, a key has one script call in flight at a time, in the order made; other keys go beside it', async () => {
    const gated = gatedClient(toScriptClient(redis), { ordered: false });
    const prefix = uniquePrefix('one-per-key');
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'fixed-window', rule: new Rule(40, 1e12), onStoreError: 'deny', prefix });
    const alone = new RedisRateLimiter({ client: gated, algorithm: 'fixed-window', rule: new Rule(40, 1e12), onStoreError: 'deny', prefix: `${prefix}alone:`, batch: false });
    // One tick: 40 calls on one key (three batches in one round), and alone, three on `a` and one on `b`.
    const hot = Array.from({ length: 40 }, () => limiter.tryAcquire('hot'));
    const sole = [alone.tryAcquire('a'), alone.tryAcquire('a'), alone.tryAcquire('b'), alone.tryAcquire('a')];
    await nextMacrotask();
    // Sent together, a client without order could run the later ones first.
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, 1, BATCH]);
    gated.open();
    expect((await Promise.all(hot)).map(({ remaining }) => remaining)).toEqual(Array.from({ length: 40 }, (_, i) => 39 - i));
    expect((await Promise.all(sole)).map(({ remaining }) => remaining)).toEqual([39, 38, 39, 37]);
  });

  test('calls on one key arriving across callbacks decide in the order made, as one by one would, over several batches', async () => {
    const gated = gatedClient(toScriptClient(redis));
    const limiter = new RedisRateLimiter({ client: gated, algorithm: 'fixed-window', rule: new Rule(40, 1e12), onStoreError: 'deny', prefix: uniquePrefix('order-across') });
    // 100 calls on 3 keys with permits 1 to 3, one per macrotask, the first holding the rest back:
    // the 99 behind it go as batches of at most 16, each key's calls spread over all of them.
    const calls = Array.from({ length: 100 }, (_, i) => ({ key: `k${i % 3}`, permits: 1 + ((i * 7) % 3) }));
    const decisions: Promise<{ allowed: boolean; remaining: number }>[] = [];
    for (const { key, permits } of calls) {
      decisions.push(limiter.tryAcquire(key, permits));
      await nextMacrotask();
    }
    gated.open();
    const used = new Map<string, number>();
    const expected = calls.map(({ key, permits }) => {
      const before = used.get(key) ?? 0;
      if (before + permits > 40) return { allowed: false, remaining: 40 - before };
      used.set(key, before + permits);
      return { allowed: true, remaining: 40 - before - permits };
    });
    expect((await Promise.all(decisions)).map(({ allowed, remaining }) => ({ allowed, remaining }))).toEqual(expected);
    expect(gated.sent.map((keys) => keys.length)).toEqual([1, ...Array.from({ length: 6 }, () => BATCH), 99 - 6 * BATCH]);
    expect(expected.filter(({ allowed }) => !allowed).length).toBeGreaterThan(0);
  });

  test('each call waiting behind a round is bounded by timeoutMs from its own start, not the round\'s', async () => {
    const errors: [unknown, string][] = [];
    const limiter = new RedisRateLimiter({
      client: { evalsha: () => new Promise(() => {}), eval: () => new Promise(() => {}) },
      algorithm: 'token-bucket',
      rule,
      onStoreError: 'deny',
      timeoutMs: 100,
      onError: (error, key) => errors.push([error, key]),
    });
    const started = performance.now();
    const settledAt = (decision: Promise<{ degraded?: string | undefined }>) => decision.then(({ degraded }) => ({ degraded, atMs: performance.now() - started }));
    const first = settledAt(limiter.tryAcquire('first'));
    await new Promise((resolve) => setTimeout(resolve, 60));
    const lateStart = performance.now() - started;
    const late = settledAt(limiter.tryAcquire('late', 2));
    const [a, b] = await Promise.all([first, late]);
    expect(a.degraded).toBe('store-timeout');
    expect(b.degraded).toBe('store-timeout');
    expect(a.atMs).toBeGreaterThanOrEqual(99);
    expect(a.atMs).toBeLessThan(b.atMs);
    // The late call waited for the round in flight, then was sent, and still got its own 100 ms.
    expect(b.atMs - lateStart).toBeGreaterThanOrEqual(99);
    expect(errors).toEqual([
      [expect.any(RedisTimeoutError), 'first'],
      [expect.any(RedisTimeoutError), 'late'],
    ]);
  });

  test('a round that times out releases the calls waiting behind it: they reach Redis and get real answers', async () => {
    let stall = true;
    const inner = toScriptClient(redis);
    const sent: number[] = [];
    const limiter = new RedisRateLimiter({
      client: {
        evalsha: (sha1, keys, args) => {
          sent.push(keys.length);
          return stall ? new Promise(() => {}) : inner.evalsha(sha1, keys, args);
        },
        eval: (script, keys, args) => inner.eval(script, keys, args),
      },
      algorithm: 'token-bucket',
      rule,
      onStoreError: 'deny',
      timeoutMs: 300,
      prefix: uniquePrefix('released'),
    });
    // Bounds on fake timers: Redis's real answers to the released calls come while no fake time
    // passes, so they cannot lose a race with their own bounds on a loaded machine.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    try {
      const stalled = limiter.tryAcquire('stalled');
      await nextMacrotask();
      stall = false;
      // Started half a bound later, so they have time left once the stalled round gives up.
      await vi.advanceTimersByTimeAsync(150);
      const behind = [];
      for (let i = 0; i < 3; i++) {
        behind.push(limiter.tryAcquire(`behind-${i}`));
        await nextMacrotask();
      }
      expect(sent).toEqual([1]);
      await vi.advanceTimersByTimeAsync(150);
      expect((await stalled).degraded).toBe('store-timeout');
      expect((await Promise.all(behind)).map(({ allowed, remaining, degraded }) => ({ allowed, remaining, degraded }))).toEqual(
        Array.from({ length: 3 }, () => ({ allowed: true, remaining: 3, degraded: undefined })),
      );
      expect(sent).toEqual([1, 3]);
    } finally {
      vi.useRealTimers();
    }
  });

  test('a call whose bound passes while it waits is answered by the policy and never sent', async () => {
    const sent: string[][] = [];
    const limiter = new RedisRateLimiter({
      client: {
        evalsha: (_sha1, keys) => {
          sent.push(keys);
          return new Promise(() => {});
        },
        eval: () => new Promise(() => {}),
      },
      algorithm: 'token-bucket',
      rule,
      onStoreError: 'allow',
      timeoutMs: 50,
      prefix: 'p:',
    });
    const first = limiter.tryAcquire('first');
    await nextMacrotask();
    const waiting = limiter.tryAcquire('waiting');
    // Both bounds pass before the timer can run, so the waiting call is answered before its turn.
    const until = performance.now() + 80;
    while (performance.now() < until);
    expect((await Promise.all([first, waiting])).map(({ degraded }) => degraded)).toEqual(['store-timeout', 'store-timeout']);
    await nextMacrotask();
    expect(sent).toEqual([['p:token-bucket:first']]);
  });
});
