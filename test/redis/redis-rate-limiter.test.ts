// src/redis/redis-rate-limiter.ts: options, client shapes, key layout and expiry, server clock, NOSCRIPT, script digests.
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Decision, ManualClock, Rule } from '../../src/index';
import { type RedisClientLike, RedisRateLimiter, type RedisRateLimiterOptions } from '../../src/redis';
import { toScriptClient as toScriptClientForTest } from '../../src/redis/client';
import { plans } from '../../src/redis/scripts';
import { expirySlackMs } from '../../src/store/constants';
import { algorithmNames } from './helpers/algorithms';
import { ioredisClient, type NodeRedis, nodeRedisClient, redisPort, uniquePrefix } from './helpers/clients';
import { countingClient } from './helpers/counting-client';
import { rangeError, typeError } from '../../src/core/errors';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(!redisPort)('RedisRateLimiter', () => {
  let redis: Redis;
  let nodeRedis: NodeRedis;
  beforeAll(async () => {
    redis = ioredisClient();
    nodeRedis = await nodeRedisClient();
  });
  afterAll(async () => {
    redis.disconnect();
    await nodeRedis.close();
  });

  describe('bad input throws a TypeError or RangeError naming the value, and sends nothing to Redis', () => {
    const valid = (): RedisRateLimiterOptions => ({ client: countingClient(redis), algorithm: 'token-bucket', rule: Rule.perSecond(10), onStoreError: 'deny' });
    const fails = (options: object, type: typeof TypeError, message: string) => () => {
      const client = countingClient(redis);
      // The error of that class, with the code of its kind.
      expect(() => new RedisRateLimiter({ ...valid(), client, ...options } as RedisRateLimiterOptions)).toThrow(type === RangeError ? rangeError(message) : typeError(message));
      expect(client.sent).toEqual([]);
    };

    test('onStoreError missing', fails({ onStoreError: undefined }, TypeError, "ratekeeper: `onStoreError` is required and must be 'allow', 'deny' or a RateLimiter to fall back on, got undefined"));
    test('onStoreError unknown', fails({ onStoreError: 'open' }, TypeError, 'ratekeeper: `onStoreError` is required and must be \'allow\', \'deny\' or a RateLimiter to fall back on, got "open"'));
    test(
      'algorithm unknown',
      fails({ algorithm: 'gcra' }, TypeError, 'ratekeeper: `algorithm` must be one of \'token-bucket\', \'leaky-bucket\', \'fixed-window\', \'sliding-window-log\', \'sliding-window-counter\', got "gcra"'),
    );
    test('rule missing', fails({ rule: undefined }, TypeError, 'ratekeeper: `rule` must be a Rule, e.g. Rule.perSecond(10), or a function of the key, got undefined'));
    test('rule with a bad limit', fails({ rule: { limit: 0, windowMs: 1000 } }, RangeError, 'ratekeeper: `limit` must be a safe integer of at least 1, got 0'));
    test('client of no known shape', fails({ client: { get() {} } }, TypeError, 'ratekeeper: `client` must be an ioredis, node-redis or Valkey GLIDE client, or an object with evalsha(sha1, keys, args) and eval(script, keys, args), got an object'));
    test('timeoutMs zero', fails({ timeoutMs: 0 }, RangeError, 'ratekeeper: `timeoutMs` must be an integer from 1 to 2147483647, or Infinity, got 0'));
    test('timeoutMs beyond setTimeout', fails({ timeoutMs: 2 ** 31 }, RangeError, 'ratekeeper: `timeoutMs` must be an integer from 1 to 2147483647, or Infinity, got 2147483648'));
    test('prefix not a string', fails({ prefix: 7 }, TypeError, 'ratekeeper: `prefix` must be a string, got 7'));
    test('clock without now()', fails({ clock: {} }, TypeError, 'ratekeeper: `clock` must be an object with a now() method, got an object'));
    test('onError not a function', fails({ onError: 'log' }, TypeError, 'ratekeeper: `onError` must be a function, got "log"'));
    test('batch not a boolean', fails({ batch: 'yes' }, TypeError, 'ratekeeper: `batch` must be true or false, got "yes"'));
    test('refusalCache bound not an integer', fails({ refusalCache: { maxKeys: 0.5 } }, RangeError, 'ratekeeper: `refusalCache.maxKeys` must be a safe integer of at least 1, got 0.5'));
    test('refusalCache time bound zero', fails({ refusalCache: { maxMs: 0 } }, RangeError, 'ratekeeper: `refusalCache.maxMs` must be a safe integer of at least 1, got 0'));
    test('refusalCache time bound not a number', fails({ refusalCache: { maxKeys: 5, maxMs: '1s' } }, TypeError, 'ratekeeper: `refusalCache.maxMs` must be a number, got "1s"'));
    test('refusalCache a list', fails({ refusalCache: [] }, TypeError, 'ratekeeper: `refusalCache` must be true, false or { maxKeys?, maxMs? }, got an array'));

    test('permits out of range, not an integer, or not a number; key not a string: the promise rejects', async () => {
      const client = countingClient(redis);
      const limiter = new RedisRateLimiter({ ...valid(), client });
      await expect(limiter.tryAcquire('k', 12)).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 10, got 12'));
      await expect(limiter.tryAcquire('k', 0)).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 10, got 0'));
      await expect(limiter.tryAcquire('k', 1.5)).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 10, got 1.5'));
      await expect(limiter.tryAcquire('k', '2' as unknown as number)).rejects.toThrow(typeError('ratekeeper: `permits` must be a number, got "2"'));
      await expect(limiter.tryAcquire(42 as unknown as string)).rejects.toThrow(typeError('ratekeeper: `key` must be a string, got 42'));
      expect(client.sent).toEqual([]);
    });
  });

  test('ioredis, node-redis and the adapter shape give the same decisions', async () => {
    const prefix = uniquePrefix('clients');
    const clock = new ManualClock(1_000_000);
    const clients: RedisClientLike[] = [redis, nodeRedis, countingClient(redis)];
    const limiters = clients.map((client) => new RedisRateLimiter({ client, algorithm: 'sliding-window-counter', rule: Rule.perSecond(5), onStoreError: 'deny', clock, prefix }));
    const decisions: Decision[] = [];
    for (let i = 0; i < 7; i++) {
      clock.advance(100);
      decisions.push(await limiters[i % 3]!.tryAcquire('shared'));
    }
    expect(decisions.map((d) => [d.allowed, d.remaining, d.retryAfterMs])).toEqual([
      [true, 4, 0],
      [true, 3, 0],
      [true, 2, 0],
      [true, 1, 0],
      [true, 0, 0],
      // Five hits in this window weigh 5 at the start of the next; 4 after a fifth of it.
      [false, 0, 600],
      [false, 0, 500],
    ]);
  });

  test('an ACL user allowed only what docs/redis.md lists runs every algorithm, batched and alone', async () => {
    const prefix = uniquePrefix('acl');
    const user = `ratekeeper-acl-${process.pid}-${Math.random().toString(36).slice(2)}`;
    // The commands docs/redis.md's "Requirements" names, and nothing more.
    const requirements = readFileSync('docs/redis.md', 'utf8').split('## Requirements')[1]!.split('\n## ')[0]!;
    const commands = [...requirements.matchAll(/`([A-Z]+)`/g)].map(([, command]) => command!.toLowerCase());
    expect(commands).toContain('evalsha');
    await redis.acl('SETUSER', user, 'reset', 'on', '>secret', `~${prefix}*`, ...commands.map((c) => `+${c}`));
    const client = new Redis({ port: redisPort, host: '127.0.0.1', username: user, password: 'secret', enableReadyCheck: false, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    try {
      for (const algorithm of algorithmNames) {
        const limiter = new RedisRateLimiter({ client, algorithm, rule: new Rule(3, 60_000), onStoreError: 'deny', prefix });
        const batch = await Promise.all([limiter.tryAcquire('a'), limiter.tryAcquire('a', 2), limiter.tryAcquire('b')]);
        expect(batch.map(({ allowed, remaining, degraded }) => ({ allowed, remaining, degraded }))).toEqual([
          { allowed: true, remaining: 2, degraded: undefined },
          { allowed: true, remaining: 0, degraded: undefined },
          { allowed: true, remaining: 2, degraded: undefined },
        ]);
        expect(await limiter.tryAcquire('a')).toMatchObject({ allowed: false, remaining: 0 });
        expect((await limiter.tryAcquire('a')).degraded).toBeUndefined();
        // And every key operation.
        expect(await limiter.peek('b', 0)).toMatchObject({ remaining: 2 });
        const reservation = await limiter.reserve('b', 2);
        expect(reservation.decision).toMatchObject({ allowed: true, remaining: 0 });
        expect(await reservation.settle(1)).toMatchObject({ remaining: 1 });
        expect(await limiter.charge('b', 4)).toMatchObject({ remaining: 0 });
        await limiter.block('b', 60_000);
        expect(await limiter.tryAcquire('b')).toMatchObject({ allowed: false, retryAfterMs: expect.any(Number) });
        await limiter.reset('b');
        expect(await limiter.peek('b', 0)).toMatchObject({ remaining: 3 });
      }
    } finally {
      client.disconnect();
      await redis.acl('DELUSER', user);
    }
  });

  describe('keys and expiry', () => {
    /** How much longer than its bucket takes to fill a bucket's key may live (src/redis/lua/token-bucket.ts). */
    // Every key is given slack, the log's too (a caller's clock that stands still must not see its
    // key expire on the server's).
    const slackOf = (_algorithm: string, rule: Rule) => expirySlackMs(rule.windowMs);

    /** Grants `grants` requests, `pauseMs` apart, checking after each that the key lives until it is idle, and not much longer. */
    async function expectExpiryToKeepUp(limiter: RedisRateLimiter, key: string, grants: number, slack: number, pauseMs = 0): Promise<void> {
      for (let i = 0; i < grants; i++) {
        if (pauseMs > 0) await sleep(pauseMs);
        const began = performance.now();
        const decision = await limiter.tryAcquire('k');
        const ttl = await redis.pttl(key);
        const elapsed = Math.ceil(performance.now() - began);
        expect(decision.allowed).toBe(true);
        expect(ttl).toBeGreaterThanOrEqual(decision.resetAfterMs - elapsed - 1);
        // Redis counts an expiry from its own clock's millisecond, which may be one past the script's TIME.
        expect(ttl).toBeLessThanOrEqual(decision.resetAfterMs + slack + 1);
      }
    }

    test.each(algorithmNames)('%s: one key named prefix + algorithm + key, expiring once the key is idle', async (algorithm) => {
      const prefix = uniquePrefix('layout');
      const rule = new Rule(3, 60_000);
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', prefix });
      const began = performance.now();
      const { resetAfterMs } = await limiter.tryAcquire('user:1', 2);
      const keys = await redis.keys(`${prefix}*`);
      expect(keys).toEqual([`${prefix}${algorithm}:user:1`]);
      expect(await redis.type(keys[0]!)).toBe(algorithm === 'sliding-window-log' ? 'zset' : 'string');
      const ttl = await redis.pttl(keys[0]!);
      const elapsed = Math.ceil(performance.now() - began);
      expect(ttl).toBeLessThanOrEqual(resetAfterMs + slackOf(algorithm, rule) + 1); // + 1: see expectExpiryToKeepUp
      // The TTL runs down while we ask: by as much as the time asking took, however long that was.
      expect(ttl).toBeGreaterThanOrEqual(resetAfterMs - elapsed - 1);
    });

    test.each(algorithmNames)('%s: through many grants the key outlives every resetAfterMs, a bucket by at most a quarter window', async (algorithm) => {
      const prefix = uniquePrefix('keeps-up');
      const rule = new Rule(400, 40_000); // each grant moves a bucket's full time 100 ms later; its slack is 10 s
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', prefix });
      await expectExpiryToKeepUp(limiter, `${prefix}${algorithm}:k`, 300, slackOf(algorithm, rule));
    });

    test.concurrent.for(algorithmNames)('%s: across window boundaries the expiry moves on with the key', async (algorithm) => {
      const prefix = uniquePrefix('windows');
      const rule = new Rule(100, 200);
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', prefix });
      await expectExpiryToKeepUp(limiter, `${prefix}${algorithm}:k`, 14, slackOf(algorithm, rule), 50); // 700 ms: 3 or 4 windows
    });

    test.each(['token-bucket', 'leaky-bucket'] as const)("%s: a bucket's expiry runs on the server's clock, even when the caller's clock stands still", async (algorithm) => {
      const prefix = uniquePrefix('frozen');
      const rule = new Rule(400, 400); // each grant moves the full time 1 ms later; the slack is 100 ms
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', prefix, clock: new ManualClock(0) });
      await limiter.tryAcquire('k');
      await sleep(60); // more than half the slack, on the server's clock only
      await expectExpiryToKeepUp(limiter, `${prefix}${algorithm}:k`, 100, slackOf(algorithm, rule));
    });

    test.each(algorithmNames)('%s: a key holding only a short block outlives it by the slack, so a caller whose clock stands still still finds it', async (algorithm) => {
      const prefix = uniquePrefix('short-block');
      const rule = new Rule(1, 20_000); // the slack is 5 s
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', prefix, clock: new ManualClock(1_700_000_000_000) });
      await limiter.block('k', 1);
      expect(await redis.pttl(`${prefix}${algorithm}:k`)).toBeGreaterThan(1_000);
      await sleep(20); // on the server's clock only: the caller's has not moved
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1 });
    });

    test('limiters with different names or algorithms under one prefix keep apart; different rules alone share the key, carried over', async () => {
      const prefix = uniquePrefix('apart');
      const perSecond = new RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: Rule.perSecond(1), onStoreError: 'deny', prefix, name: 'second' });
      const perMinute = new RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: Rule.perMinute(1), onStoreError: 'deny', prefix, name: 'minute' });
      const bucket = new RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: Rule.perSecond(1), onStoreError: 'deny', prefix, name: 'second' });
      for (const limiter of [perSecond, perMinute, bucket]) expect((await limiter.tryAcquire('k')).allowed).toBe(true);
      const unnamed = new RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: Rule.perSecond(1), onStoreError: 'deny', prefix, clock: new ManualClock(0) });
      const raised = new RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: Rule.perSecond(3), onStoreError: 'deny', prefix, clock: new ManualClock(0) });
      expect((await unnamed.tryAcquire('k')).allowed).toBe(true);
      // The permit spent under one rule counts under the other.
      expect(await raised.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    });

    test.concurrent.for(algorithmNames)('%s: an idle key disappears by itself', async (algorithm, { expect }) => {
      const prefix = uniquePrefix('idle');
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(2, 100), onStoreError: 'deny', prefix });
      await limiter.tryAcquire('k', 2);
      expect(await redis.keys(`${prefix}*`)).toHaveLength(1);
      await sleep(2 * 100 + 100); // the counter's key lives two windows, the others at most one
      expect(await redis.keys(`${prefix}*`)).toEqual([]);
    });

    test('the log is trimmed as it goes: expired hits leave in the same script', async () => {
      const prefix = uniquePrefix('trim');
      const clock = new ManualClock(0);
      const limiter = new RedisRateLimiter({ client: redis, algorithm: 'sliding-window-log', rule: new Rule(3, 10_000), onStoreError: 'deny', clock, prefix });
      await limiter.tryAcquire('k', 3);
      clock.advance(10_000);
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 2 });
      expect(await redis.zcard(`${prefix}sliding-window-log:k`)).toBe(2);
    });

    test('the log keeps one member per grant, whatever its size (a million permits cost one), and grants of one time share it', async () => {
      const prefix = uniquePrefix('large');
      const clock = new ManualClock(1_700_000_000_000);
      const limiter = new RedisRateLimiter({ client: redis, algorithm: 'sliding-window-log', rule: Rule.perMinute(2_000_000), onStoreError: 'deny', prefix, clock, timeoutMs: 5_000 });
      const key = `${prefix}sliding-window-log:k`;
      expect(await limiter.tryAcquire('k', 1_999_990)).toMatchObject({ allowed: true, remaining: 10 });
      clock.advance(1);
      expect(await limiter.tryAcquire('k', 11)).toMatchObject({ allowed: false, remaining: 10 });
      expect(await limiter.tryAcquire('k', 3)).toMatchObject({ allowed: true, remaining: 7 });
      expect(await redis.zcard(key)).toBe(3); // and the member naming the rule
      // Per permit, this was ~250 MB; per grant it is a few dozen bytes.
      expect(await redis.memory('USAGE', key)).toBeLessThan(1_000);
      expect(await Promise.all([1, 2, 3].map((permits) => limiter.tryAcquire('k', permits)))).toMatchObject([{ remaining: 6 }, { remaining: 4 }, { remaining: 1 }]);
      expect(await redis.zcard(key)).toBe(3); // and the member naming the rule
      clock.advance(59_999);
      // The first grant has left; the second, with its six later permits, leaves at once in 1 ms.
      expect(await limiter.tryAcquire('k', 3)).toMatchObject({ allowed: true, remaining: 1_999_988 });
      expect(await limiter.tryAcquire('k', 1_999_989)).toMatchObject({ allowed: false, remaining: 1_999_988, retryAfterMs: 1 });
    });
  });

  test("without a clock, time is the Redis server's TIME, floored to whole ms", async () => {
    const windowMs = 1e9;
    const serverNow = async () => {
      const [seconds, micros] = await redis.time();
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    };
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: new Rule(1, windowMs), onStoreError: 'deny', prefix: uniquePrefix('time') });
    const before = await serverNow();
    const { resetAfterMs } = await limiter.tryAcquire('k');
    const after = await serverNow();
    const decidedAt = (Math.floor(before / windowMs) + 1) * windowMs - resetAfterMs;
    expect(decidedAt).toBeGreaterThanOrEqual(before);
    expect(decidedAt).toBeLessThanOrEqual(after);
  });

  test.each([
    ['ioredis', () => redis],
    ['node-redis', () => nodeRedis],
  ])('%s: after SCRIPT FLUSH (NOSCRIPT) the script is sent again and decides normally', async (_name, client) => {
    const limiter = new RedisRateLimiter({ client: client(), algorithm: 'token-bucket', rule: Rule.perSecond(2), onStoreError: 'deny', prefix: uniquePrefix('noscript') });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    await redis.script('FLUSH');
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
    expect((await limiter.tryAcquire('k')).degraded).toBeUndefined();
  });

  test.each([
    ['ioredis', () => redis],
    ['node-redis', () => nodeRedis],
  ])('%s: calls on one key keep their order through a NOSCRIPT reload, even when a later call finds the script loaded', async (_name, real) => {
    // The documented adapter over a real client, with a caller arriving at the moment a reload
    // goes out: by then the script is on its way into the cache, so that caller's EVALSHA would
    // succeed before the earlier caller's resent EVAL.
    const inner = toScriptClientForTest(real());
    let arriving: (() => void) | undefined;
    const client = {
      evalsha: inner.evalsha,
      eval: (script: string, keys: string[], args: string[]) => {
        const reply = inner.eval(script, keys, args);
        const caller = arriving;
        arriving = undefined;
        caller?.();
        return reply;
      },
    };
    for (const batch of [false, true]) {
      const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: new Rule(1, 1e12), onStoreError: 'deny', prefix: uniquePrefix('reload-order'), batch });
      await redis.script('FLUSH');
      const order: string[] = [];
      let second: Promise<Decision> | undefined;
      arriving = () => {
        second = limiter.tryAcquire('k').then((d) => (order.push('second'), d));
      };
      const other = limiter.tryAcquire('other');
      // Sent apart from 'other' (a batch of its own when batching), before any NOSCRIPT is back.
      await Promise.resolve();
      const first = limiter.tryAcquire('k').then((d) => (order.push('first'), d));
      await other;
      expect(await first).toStrictEqual({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
      expect(await second!).toStrictEqual({ allowed: false, limit: 1, remaining: 0, retryAfterMs: expect.any(Number), resetAfterMs: expect.any(Number) });
      expect(order).toEqual(['first', 'second']);
    }
  });

  test('one round trip per decision once the script is cached: EVALSHA only', async () => {
    const client = countingClient(redis);
    const limiter = new RedisRateLimiter({ client, algorithm: 'leaky-bucket', rule: Rule.perSecond(2), onStoreError: 'deny', prefix: uniquePrefix('trips') });
    await redis.script('FLUSH');
    for (let i = 0; i < 3; i++) await limiter.tryAcquire('k');
    expect(client.sent).toEqual(['EVALSHA', 'EVAL', 'EVALSHA', 'EVALSHA']);
  });

  test.each(Object.entries(plans))('%s: the sha1 computed here is the one Redis gives the script', async (_name, { script }) => {
    expect(await redis.script('LOAD', script.source)).toBe(script.sha1);
  });
});
