// API.md, "Admission across keys": over one Redis client with every key in one hash slot, an
// admission of RedisRateLimiter parts is one script call, atomic. Against the in-memory twins
// decided one by one with refunds, on the same ManualClock: all granted or none, each part as its
// reserve would answer (after the first refusal, as its peek), and granted parts settle as any
// reservation does. The joint path is src/store/joint-admission.ts; its parts wait for one another
// in a Gathering (src/store/gathering.ts) until each has joined or left.
import { fc, test } from '@fast-check/vitest';
import { readFileSync } from 'node:fs';
import { Redis as Upstash } from '@upstash/redis';
import { Cluster, type Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { admit, type Admission, type Decision, KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter, type RedisAlgorithm, type RedisScriptClient } from '../../src/redis';
import { toScriptClient } from '../../src/redis/client';
import { hashSlot } from '../../src/redis/slot';
import { startUpstashShim } from '../stores/support/upstash-shim';
import { oneByOne } from '../support/one-by-one';
import { algorithmNames, twins } from './helpers/algorithms';
import { ioredisClient, redisPort, uniquePrefix, useIoredis } from './helpers/clients';
import { gatedClient } from './helpers/gated-client';
import { type RedisCluster, startRedisCluster } from './helpers/redis-cluster';
import { startRedisServer } from './helpers/redis-server';

const KEYS = ['a', 'b'] as const;

/** The real client, counting the EVALSHA calls it sends (an EVAL after a NOSCRIPT reply is the same call's reload). */
function counting(redis: Redis): RedisScriptClient & { calls: number } {
  const client = {
    calls: 0,
    evalsha: (sha1: string, keys: string[], args: string[]) => {
      client.calls++;
      return redis.evalsha(sha1, keys.length, ...keys, ...args);
    },
    eval: (script: string, keys: string[], args: string[]) => {
      return redis.eval(script, keys.length, ...keys, ...args);
    },
    ordered: true,
  };
  return client;
}

const partArb = fc.record({ limiter: fc.nat(3), key: fc.nat(1), share: fc.double({ min: 0, max: 1, noNaN: true }), kept: fc.double({ min: 0, max: 2, noNaN: true }) });
const opArb = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('admit' as const), parts: fc.array(partArb, { minLength: 2, maxLength: 5 }), settle: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), dt: fc.integer({ min: 0, max: 30_000 }) }) },
);
// Windows of seconds: a key's expiry runs on Redis's own clock, which must not end it while the test's clock stands still.
const limiterArb = fc.record({ algorithm: fc.constantFrom(...algorithmNames), limit: fc.integer({ min: 1, max: 6 }), windowMs: fc.integer({ min: 20_000, max: 60_000 }) });
const setupArb = fc.record({ limiters: fc.array(limiterArb, { minLength: 4, maxLength: 4 }), ops: fc.array(opArb, { maxLength: 20 }) });

describe.skipIf(redisPort === 0)('admit over one Redis client: one atomic script', () => {
  const redis = useIoredis();

  test.prop([setupArb], { numRuns: 40 })(
    'never grants a part unless all are, and decides as the parts one by one with refunds (all five algorithms, one part in memory)',
    async ({ limiters, ops }) => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('admit-joint');
      const client = counting(redis);
      const twin = ({ algorithm, limit, windowMs }: { algorithm: RedisAlgorithm; limit: number; windowMs: number }) =>
        new KeyedRateLimiter({ algorithm: () => new twins[algorithm](new Rule(limit, windowMs)), clock });
      // Limiter 1 chooses its rule by a function (a promise): resolved before the script goes. Limiter 3 stays in memory.
      const real = limiters.map((limiter, i) => {
        const rule = new Rule(limiter.limit, limiter.windowMs);
        if (i === 3) return twin(limiter);
        const common = { client, algorithm: limiter.algorithm, onStoreError: 'deny' as const, clock, prefix, name: `l${i}`, timeoutMs: Infinity };
        return i === 1 ? new RedisRateLimiter({ ...common, rule: async () => rule }) : new RedisRateLimiter({ ...common, rule });
      });
      const byHand = limiters.map(twin);
      const states = async (set: readonly (RedisRateLimiter<Rule> | RedisRateLimiter<() => Promise<Rule>> | KeyedRateLimiter)[]) =>
        Promise.all(set.flatMap((limiter) => KEYS.map((key) => limiter.peek(key, 0))));

      for (const op of ops) {
        if (op.kind === 'admit') {
          const permitsOf = (part: (typeof op.parts)[number]) => Math.max(1, Math.ceil(part.share * limiters[part.limiter]!.limit));
          const before = await states(real);
          const calls = client.calls;
          const admission = await admit(op.parts.map((part) => ({ limiter: real[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));
          const sent = client.calls - calls;
          const stored = op.parts.filter((part) => part.limiter !== 3).length;
          // A memory part listed before every store part is decided first (when it refuses nothing
          // goes to Redis); one listed after a store part sends the admission in order.
          const firstStored = op.parts.findIndex((part) => part.limiter !== 3);
          const memoryFirst = op.parts.every((part, i) => part.limiter !== 3 || i < firstStored);
          const memoryRefused = admission.parts.some((decision, i) => op.parts[i]!.limiter === 3 && !decision.allowed);
          // Two store parts or more, after any memory part: one script call.
          if (stored >= 2 && memoryFirst && !memoryRefused) expect(sent).toBe(1);

          const { decisions, held, refused } = oneByOne(op.parts.map((part) => ({ limiter: byHand[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));
          expect(admission.decision.allowed).toBe(!refused);
          expect(admission.parts).toEqual(decisions);
          if (refused) {
            expect(await states(real)).toEqual(before);
          } else if (op.settle) {
            const actual = op.parts.map((part) => Math.floor(part.kept * permitsOf(part)));
            expect(await admission.settle(actual)).toEqual(held.map((reservation, i) => reservation.settle(actual[i]!)));
          } else {
            await admission.cancel();
            for (const reservation of held) reservation.cancel();
          }
        } else {
          clock.advance(op.dt);
        }
        expect(await states(real)).toEqual(await states(byHand));
      }
    },
  );
});

/** Three limiters of different algorithms, rules and names (one choosing its rule by a function), as a request's admission uses them. */
function threeLimiters(client: unknown, options: { prefix: string; onStoreError?: 'allow' | 'deny'; timeoutMs?: number; onError?: (error: Error) => void }) {
  const common = {
    client: client as Redis,
    onStoreError: options.onStoreError ?? ('deny' as const),
    prefix: options.prefix,
    timeoutMs: options.timeoutMs ?? 5_000,
    onError: options.onError,
    clock: new ManualClock(1_700_000_000_000),
  };
  return [
    new RedisRateLimiter({ ...common, algorithm: 'token-bucket', rule: Rule.perMinute(3), name: 'user' }),
    new RedisRateLimiter({ ...common, algorithm: 'sliding-window-log', rule: () => Rule.perMinute(5), name: 'org' }),
    new RedisRateLimiter({ ...common, algorithm: 'fixed-window', rule: Rule.perMinute(100), name: 'tokens' }),
  ] as const;
}

type Three = ReturnType<typeof threeLimiters>;

/** The EVALSHA calls a server counted since its start or CONFIG RESETSTAT (a server of the test's own: no other file's calls). */
const evalshaCalls = async (redis: Redis) => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);

const states = (limiters: Three, keys: readonly string[]): Promise<Decision[]> => Promise.all(limiters.map((limiter, i) => limiter.peek(keys[i]!, 0)));

/** An admission over the three, the last part asking `tokens`. */
const admitThree = (limiters: Three, keys: readonly string[], tokens: number) =>
  admit([
    { limiter: limiters[0], key: keys[0]! },
    { limiter: limiters[1], key: keys[1]! },
    { limiter: limiters[2], key: keys[2]!, permits: tokens },
  ]);

describe.skipIf(redisPort === 0)('admit with a memory part after the Redis parts', () => {
  const client = useIoredis();

  it('reports the first refusal in order: a Redis key asked twice refuses before the memory key asked twice', async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const redis = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(1, 20_000), onStoreError: 'deny', clock, prefix: uniquePrefix('admit-order') });
    const memory = new KeyedRateLimiter({ algorithm: () => new twins['token-bucket'](new Rule(1, 20_000)), clock });
    const admission = await admit([
      { limiter: redis, key: 'a' },
      { limiter: redis, key: 'a' },
      { limiter: memory, key: 'b' },
      { limiter: memory, key: 'b' },
    ]);
    // One by one: the second Redis part refuses, and the memory parts after it are answered by their peek.
    expect(admission.parts.map((decision) => decision.allowed)).toEqual([true, false, true, true]);
    expect(admission.decision).toEqual(admission.parts[1]);
    expect(await redis.peek('a', 0)).toMatchObject({ remaining: 1 });
    expect(memory.peek('b', 0)).toMatchObject({ remaining: 1 });
  });
});

describe.skipIf(redisPort === 0)('admit over one Redis server: round trips and failures', () => {
  test('parts on one client: one EVALSHA per admission (INFO commandstats of a server of its own), where one by one sends three', async () => {
    const server = await startRedisServer();
    const redis = ioredisClient(server.port);
    try {
      const limiters = threeLimiters(redis, { prefix: uniquePrefix('round-trips') });
      const keys = ['user-1', 'org-1', 'org-1'];
      await admitThree(limiters, keys, 1); // the script is loaded: EVALSHA, NOSCRIPT, EVAL
      await redis.config('RESETSTAT');
      const granted = await admitThree(limiters, keys, 10);
      expect(granted.decision.allowed).toBe(true);
      expect(await evalshaCalls(redis)).toBe(1);
      const refused = await admitThree(limiters, keys, 90);
      expect(refused.decision.allowed).toBe(false);
      expect(await evalshaCalls(redis)).toBe(2);
      expect(/cmdstat_eval:/.test(await redis.info('commandstats'))).toBe(false);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });

  test('a script flushed from the server is sent anew (NOSCRIPT), and the admission is as if it had not been', async () => {
    const redis = ioredisClient();
    try {
      const limiters = threeLimiters(redis, { prefix: uniquePrefix('noscript') });
      const keys = ['u', 'o', 'o'];
      expect((await admitThree(limiters, keys, 1)).decision.allowed).toBe(true);
      await redis.script('FLUSH');
      const admission = await admitThree(limiters, keys, 1);
      expect(admission.parts.map((part) => [part.allowed, part.remaining, part.degraded])).toEqual([
        [true, 1, undefined],
        [true, 3, undefined],
        [true, 98, undefined],
      ]);
    } finally {
      redis.disconnect();
    }
  });

  test('refused: nothing spent in any key, the parts before the refusal as their reserve answered, the rest as their peek; granted parts settle and cancel', async () => {
    const redis = ioredisClient();
    try {
      const limiters = threeLimiters(redis, { prefix: uniquePrefix('refused') });
      const keys = ['u', 'o', 'o'];
      await limiters[2].charge(keys[2]!, 60);
      const before = await states(limiters, keys);
      const refused = await admit([
        { limiter: limiters[0], key: keys[0]!, permits: 2 },
        { limiter: limiters[2], key: keys[2]!, permits: 41 },
        { limiter: limiters[1], key: keys[1]! },
      ]);
      expect(refused.parts.map((part) => [part.allowed, part.remaining])).toEqual([
        [true, 1],
        [false, 40],
        [true, 4],
      ]);
      expect(refused.decision).toBe(refused.parts[1]);
      expect(await states(limiters, keys)).toEqual(before);
      await refused.cancel(); // nothing to give back

      const granted = await admitThree(limiters, keys, 30);
      expect(granted.decision).toBe(granted.parts[0]); // the fewest left binds
      expect((await granted.settle([1, 1, 20])).map((state) => state.remaining)).toEqual([2, 4, 20]);
      const again = await admitThree(limiters, keys, 10);
      await again.cancel();
      expect((await states(limiters, keys)).map((state) => state.remaining)).toEqual([2, 4, 20]);
    } finally {
      redis.disconnect();
    }
  });

  test('two separately loaded copies of the library join their parts in one script (Symbol.for)', async () => {
    const server = await startRedisServer();
    const redis = ioredisClient(server.port);
    try {
      const first = await import('../../src/redis');
      vi.resetModules();
      const second = await import('../../src/redis');
      const { admit: admitOfSecond } = await import('../../src/index');
      expect(second.RedisRateLimiter).not.toBe(first.RedisRateLimiter);
      const prefix = uniquePrefix('copies');
      const user = new first.RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: Rule.perMinute(2), onStoreError: 'deny', prefix, name: 'user' });
      const org = new second.RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: Rule.perMinute(5), onStoreError: 'deny', prefix, name: 'org' });
      await admitOfSecond([{ limiter: user, key: 'u' }, { limiter: org, key: 'o' }]); // loads the script
      await redis.config('RESETSTAT');
      const granted = await admitOfSecond([{ limiter: user, key: 'u' }, { limiter: org, key: 'o' }]);
      expect(granted.parts.map((part) => part.remaining)).toEqual([0, 3]);
      const refused = await admit([{ limiter: org, key: 'o' }, { limiter: user, key: 'u' }]);
      expect(refused.parts.map((part) => part.allowed)).toEqual([true, false]);
      expect(await evalshaCalls(redis)).toBe(2);
      expect((await org.peek('o', 0)).remaining).toBe(3);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });

  test('a part that cannot join (an async limiter of its own) is reserved before the script, and given back when it refuses', async () => {
    const redis = ioredisClient();
    try {
      const limiters = threeLimiters(redis, { prefix: uniquePrefix('beside') });
      const memory = new KeyedRateLimiter({ algorithm: () => new twins['fixed-window'](new Rule(1, 60_000)), clock: new ManualClock(0) });
      const order: string[] = [];
      const other = {
        reserve: async (key: string, permits: number) => {
          order.push('other');
          const reservation = memory.reserve(key, permits);
          return { decision: reservation.decision, settle: async (actual: number) => reservation.settle(actual), cancel: async () => reservation.cancel() };
        },
        peek: async (key: string, permits: number) => memory.peek(key, permits),
      };
      const parts = [
        { limiter: limiters[0], key: 'u' },
        { limiter: other, key: 'x' },
        { limiter: limiters[2], key: 'o', permits: 90 },
      ];
      const granted = await admit(parts);
      expect(granted.parts.map((part) => part.allowed)).toEqual([true, true, true]);
      await granted.settle([1, 1, 90]);
      // The script refuses (tokens): the other part, reserved first, is given back.
      memory.reset('x');
      const refused = await admit(parts);
      expect(refused.parts.map((part) => part.allowed)).toEqual([true, true, false]);
      expect(memory.peek('x', 0).remaining).toBe(1);
      // The other part refuses: nothing is reserved in Redis, whose parts are answered by their peek.
      memory.tryAcquire('x');
      const before = await states(limiters, ['u', 'o', 'o']);
      const none = await admit(parts);
      expect(none.parts.map((part) => part.allowed)).toEqual([true, false, false]);
      expect(await states(limiters, ['u', 'o', 'o'])).toEqual(before);
      expect(order).toEqual(['other', 'other', 'other']);
    } finally {
      redis.disconnect();
    }
  });

  test.each(['redis-server', 'valkey-server'] as const)('%s: awkward keys (braces, unicode, NUL, 10 000 bytes, empty) in one script, all or nothing', async (binary) => {
    const server = await startRedisServer({ binary });
    const redis = ioredisClient(server.port);
    try {
      const limiters = threeLimiters(redis, { prefix: uniquePrefix('awkward') });
      for (const key of ['{', '}{', '{org}:x', 'ключ-🚀', 'nul\u0000byte', 'x'.repeat(10_000), '']) {
        const keys = [key, key, key];
        expect((await admitThree(limiters, keys, 60)).decision.allowed).toBe(true);
        const before = await states(limiters, keys);
        const refused = await admitThree(limiters, keys, 41);
        expect(refused.parts.map((part) => part.allowed)).toEqual([true, true, false]);
        expect(await states(limiters, keys)).toEqual(before);
      }
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });

  test.each(['fixed-window', 'sliding-window-log'] as const)('%s: a key the previous version wrote, adopted by a part of a refused admission, is put back as it was', async (algorithm) => {
    const redis = ioredisClient();
    try {
      const prefix = uniquePrefix('adopted');
      const rule = new Rule(5, 60_000);
      const now = 1_700_000_000_000;
      // The previous version's key for 'k' (its rule in the name), made by its own script: 2 used.
      const previous = readFileSync(new URL(`./fixtures/previous-scripts/${algorithm}.lua`, import.meta.url), 'utf8');
      const oldKey = `${prefix}${algorithm}:5/60000:k`;
      await redis.eval(previous, 1, oldKey, '5', '60000', '2', String(now));
      const dump = await redis.dumpBuffer(oldKey);
      const clock = new ManualClock(now);
      const adopting = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', prefix, clock });
      const full = new RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: new Rule(1, 60_000), onStoreError: 'deny', prefix, name: 'full', clock });
      await full.tryAcquire('k');
      const refused = await admit([{ limiter: adopting, key: 'k' }, { limiter: full, key: 'k' }]);
      expect(refused.parts.map((part) => [part.allowed, part.remaining])).toEqual([
        [true, 2],
        [false, 0],
      ]);
      expect(await redis.dumpBuffer(oldKey)).toEqual(dump);
      expect(await redis.exists(`${prefix}${algorithm}:k`)).toBe(0);
      // Adopted later all the same: nothing the previous version counted is forgiven.
      expect((await adopting.tryAcquire('k')).remaining).toBe(2);
      expect(await redis.exists(oldKey)).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  test('a server without DUMP: the first admission is answered by the outage policy, later ones go in order', async () => {
    const server = await startRedisServer({ args: ['--rename-command', 'DUMP', ''] });
    const redis = ioredisClient(server.port);
    try {
      const limiters = threeLimiters(redis, { prefix: uniquePrefix('no-dump') });
      const keys = ['u', 'o', 'o'];
      const first = await admitThree(limiters, keys, 1);
      expect(first.parts.map((part) => part.degraded)).toEqual(['store-error', 'store-error', 'store-error']);
      const granted = await admitThree(limiters, keys, 1);
      expect(granted.parts.map((part) => [part.allowed, part.remaining, part.degraded])).toEqual([
        [true, 2, undefined],
        [true, 4, undefined],
        [true, 99, undefined],
      ]);
      const refused = await admitThree(limiters, keys, 100);
      expect(refused.decision.allowed).toBe(false);
      expect((await states(limiters, keys)).map((state) => state.remaining)).toEqual([2, 4, 99]);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });

  test('a key holding a foreign value fails the whole script: every part is answered by its outage policy, and nothing is spent', async () => {
    const redis = ioredisClient();
    try {
      const prefix = uniquePrefix('foreign');
      const errors: Error[] = [];
      const deny = threeLimiters(redis, { prefix, onError: (error) => errors.push(error) });
      await redis.set(`${prefix}tokens:fixed-window:o`, 'not a state');
      const before = await deny[0].peek('u', 0);
      const refused = await admitThree(deny, ['u', 'o', 'o'], 1);
      expect(refused.parts.map((part) => [part.allowed, part.degraded])).toEqual([
        [false, 'store-error'],
        [false, 'store-error'],
        [false, 'store-error'],
      ]);
      expect(errors).toHaveLength(3);
      expect(await deny[0].peek('u', 0)).toEqual(before);
      const allow = threeLimiters(redis, { prefix, onStoreError: 'allow' });
      const granted = await admitThree(allow, ['u', 'o', 'o'], 1);
      expect(granted.parts.map((part) => [part.allowed, part.degraded])).toEqual([
        [true, 'store-error'],
        [true, 'store-error'],
        [true, 'store-error'],
      ]);
      await granted.settle([1, 1, 1]); // degraded: nothing held, nothing sent
      expect(await deny[0].peek('u', 0)).toEqual(before);
    } finally {
      redis.disconnect();
    }
  });

  test('a rule function that throws rejects the admission with its error, and nothing is spent', async () => {
    const redis = ioredisClient();
    try {
      const prefix = uniquePrefix('rule-throws');
      const [user, , tokens] = threeLimiters(redis, { prefix });
      const broken = new RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: async () => Promise.reject(new Error('no plan')), onStoreError: 'deny', prefix, name: 'broken' });
      await expect(admit([{ limiter: user, key: 'u' }, { limiter: broken, key: 'o' }, { limiter: tokens, key: 'o' }])).rejects.toThrow('no plan');
      expect((await user.peek('u', 0)).remaining).toBe(3);
      expect((await tokens.peek('o', 0)).remaining).toBe(100);
    } finally {
      redis.disconnect();
    }
  });

  test('a Gathering goes without a part whose rule lookup outlives its timeoutMs: the others are sent, then given back, and the admission is refused', async () => {
    const redis = ioredisClient();
    try {
      const prefix = uniquePrefix('rule-slow');
      const [user, , tokens] = threeLimiters(redis, { prefix });
      // Never answers: the part is answered by its outage policy at its timeout and leaves the gathering.
      const slow = new RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: () => new Promise<Rule>(() => {}), onStoreError: 'deny', prefix, name: 'slow', timeoutMs: 50 });
      const admission = await admit([{ limiter: user, key: 'u' }, { limiter: slow, key: 'o' }, { limiter: tokens, key: 'o' }]);
      expect(admission.parts.map((part) => [part.allowed, part.degraded])).toEqual([
        [true, undefined],
        [false, 'store-timeout'],
        [true, undefined],
      ]);
      expect(admission.decision).toEqual(admission.parts[1]);
      expect((await user.peek('u', 0)).remaining).toBe(3);
      expect((await tokens.peek('o', 0)).remaining).toBe(100);
    } finally {
      redis.disconnect();
    }
  });

  test('a script call that times out: every part answered by its outage policy (store-timeout), at once with the others', async () => {
    const redis = ioredisClient();
    const gated = gatedClient(toScriptClient(redis));
    try {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const limiters = threeLimiters(gated, { prefix: uniquePrefix('timeout'), timeoutMs: 200 });
      let admission: Admission | undefined;
      const answered = Promise.resolve(admitThree(limiters, ['u', 'o', 'o'], 1)).then((made) => (admission = made));
      await vi.advanceTimersByTimeAsync(199);
      expect(admission).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1);
      await answered;
      expect(admission!.parts.map((part) => [part.allowed, part.degraded])).toEqual([
        [false, 'store-timeout'],
        [false, 'store-timeout'],
        [false, 'store-timeout'],
      ]);
      expect(gated.sent).toHaveLength(1);
    } finally {
      vi.useRealTimers();
      gated.open();
      redis.disconnect();
    }
  });
});

describe.skipIf(redisPort === 0)('admit over a Redis Cluster', { timeout: 60_000 }, () => {
  let cluster: RedisCluster;
  let client: Cluster;
  const sent: string[][] = [];

  beforeAll(async () => {
    cluster = await startRedisCluster();
    client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
    // A counting wrapper around the real client: the keys of each script call it sends.
    const evalsha = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { evalsha: (...args: unknown[]) => Promise<unknown> }).evalsha = (...args: unknown[]) => {
      sent.push((args as [string, number, string[]])[2]);
      return evalsha(...args);
    };
  }, 60_000);

  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  test('keys sharing a hash tag ({org-7}): one script on one node, atomic', async () => {
    const prefix = uniquePrefix('cluster-joint');
    const limiters = threeLimiters(client, { prefix });
    const keys = ['{org-7}:user-1', '{org-7}', '{org-7}'];
    sent.length = 0;
    const granted = await admitThree(limiters, keys, 30);
    expect(granted.decision.allowed).toBe(true);
    const joint = [`${prefix}user:token-bucket:{org-7}:user-1`, `${prefix}org:sliding-window-log:{org-7}`, `${prefix}tokens:fixed-window:{org-7}`];
    // Keys not stored yet: the script answers absent, each previous version's key is read (in its
    // own slot), and the script goes again with them (docs/redis.md).
    const previous = [[`${prefix}user:token-bucket:3/60000:{org-7}:user-1`], [`${prefix}org:sliding-window-log:5/60000:{org-7}`], [`${prefix}tokens:fixed-window:100/60000:{org-7}`]];
    expect(sent).toEqual([joint, ...previous, joint]);
    const before = await states(limiters, keys);
    sent.length = 0;
    const refused = await admitThree(limiters, keys, 71);
    expect(refused.decision.allowed).toBe(false);
    expect(sent).toHaveLength(1);
    expect(await states(limiters, keys)).toEqual(before);
    await granted.settle([1, 1, 10]);
    expect((await states(limiters, keys)).map((state) => state.remaining)).toEqual([2, 4, 90]);
  });

  test('keys in different slots: reserved in order, the granted ones given back when one refuses', async () => {
    const prefix = uniquePrefix('cluster-apart');
    const limiters = threeLimiters(client, { prefix });
    const keys = ['user-1', 'org-1', 'org-2'];
    expect(new Set(limiters.map((limiter, i) => hashSlot(`${prefix}${['user:token-bucket:', 'org:sliding-window-log:', 'tokens:fixed-window:'][i]}${keys[i]}`))).size).toBeGreaterThan(1);
    await limiters[2].charge(keys[2]!, 1);
    const before = await states(limiters, keys);
    sent.length = 0;
    const refused = await admitThree(limiters, keys, 100);
    expect(refused.decision.allowed).toBe(false);
    // One reservation each (the third refused), then the two granted ones cancelled; the first two
    // keys, not stored yet, each read their previous version's key and reserve again.
    expect(sent.map((keys) => keys.length)).toEqual([1, 1, 1, 1, 1, 1, 1, 1, 1]);
    expect(await states(limiters, keys)).toEqual(before);
  });
});

describe.skipIf(redisPort === 0)('admit through @upstash/redis (a RedisScriptClient), over the loopback Upstash shim', () => {
  test('one script call per admission (INFO commandstats of a server of its own), all or nothing', async () => {
    const server = await startRedisServer();
    const redis = ioredisClient(server.port);
    const shim = await startUpstashShim(redis, 'token');
    try {
      const client = new Upstash({ url: shim.url, token: 'token' });
      const limiters = threeLimiters(client, { prefix: uniquePrefix('upstash-joint') });
      const keys = ['u', 'o', 'o'];
      await admitThree(limiters, keys, 1);
      const before = await states(limiters, keys);
      await redis.config('RESETSTAT');
      const refused = await admitThree(limiters, keys, 100);
      expect(refused.decision.allowed).toBe(false);
      expect(await evalshaCalls(redis)).toBe(1);
      expect(await states(limiters, keys)).toEqual(before);
      const granted = await admitThree(limiters, keys, 9);
      expect(granted.parts.map((part) => [part.allowed, part.remaining])).toEqual([
        [true, 1],
        [true, 3],
        [true, 90],
      ]);
      await granted.settle([1, 1, 4]);
      expect((await states(limiters, keys)).map((state) => state.remaining)).toEqual([1, 3, 95]);
    } finally {
      await shim.close();
      redis.disconnect();
      await server.stop();
    }
  });
});
