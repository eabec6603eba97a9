// Rules chosen per key (`rule: (key) => Rule | Promise<Rule>`, src/store/store-rate-limiter.ts) over a
// real Redis: each key decides as the in-memory twin of its own rule; a slow lookup keeps its key's
// calls in order and holds no other key back; a lookup that throws, answers no rule or outlives
// timeoutMs; permits checked against the key's own rule; the HTTP `w` of each key's own window; a
// settle, cancel or lease extension made under a key's old rule keeps the key under its new one.
import { afterEach, describe, expect, test, vi } from 'vitest';
import { type Decision, KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { withRateLimit } from '../../src/http';
import { RedisRateLimiter, type RuleOf } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';
import { MOVES, staleLeases, staleSettles } from '../support/stale-settle';

const plans: Record<string, Rule> = { free: new Rule(2, 60_000), pro: new Rule(5, 3_600_000) };
const planOf = (key: string): Rule => plans[key.split(':')[0]!]!;

/** A promise and its resolver, to hold a rule lookup open. */
function gate<T>(): { promise: Promise<T>; open: (value: T) => void; fail: (error: unknown) => void } {
  let open!: (value: T) => void;
  let fail!: (error: unknown) => void;
  const promise = new Promise<T>((resolve, reject) => {
    open = resolve;
    fail = reject;
  });
  return { promise, open, fail };
}

describe.skipIf(!redisPort)('rules per key over Redis', () => {
  const client = useIoredis();
  afterEach(() => vi.restoreAllMocks());

  for (const algorithm of algorithmNames) {
    test(`${algorithm}: an async rule function decides each key as the in-memory twin of its own rule`, async () => {
      const clock = new ManualClock(1_000_000);
      const limiter = new RedisRateLimiter({ client, algorithm, rule: async (key: string) => planOf(key), onStoreError: 'deny', clock, prefix: uniquePrefix('per-key') });
      const twin = new KeyedRateLimiter({ algorithm: (key) => new twins[algorithm](planOf(key)), clock });
      for (let step = 0; step < 24; step++) {
        const key = ['free:a', 'pro:b', 'free:c'][step % 3]!;
        clock.advance(step % 4 === 0 ? 7_000 : 0);
        expect(await limiter.tryAcquire(key), `step ${step} ${key}`).toEqual(twin.tryAcquire(key));
      }
      expect(await limiter.peek('pro:b', 0)).toEqual(twin.peek('pro:b', 0));
    });
  }

  for (const algorithm of algorithmNames) {
    test.each(MOVES)(`${algorithm}: a settle or cancel of a reservation made under the key's old rule keeps the key under its new rule, as the reconfigured twin (%s to %s)`, async (...move) => {
      const { store, memory } = await staleSettles(algorithm, (rule, clock) => new RedisRateLimiter({ client, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('stale-settle') }), move);
      expect(store).toStrictEqual(memory);
    });

    test.each(MOVES)(`${algorithm}: with concurrency, a lease taken under the key's old rule is extended, settled and cancelled under its new rule, as the reconfigured twin (%s to %s)`, async (...move) => {
      const { store, memory } = await staleLeases(algorithm, (rule, clock, concurrency) => new RedisRateLimiter({ client, algorithm, rule, concurrency, onStoreError: 'deny', clock, prefix: uniquePrefix('stale-lease') }), move);
      expect(store).toStrictEqual(memory);
    });
  }

  test('calls on a key decide in the order made, however long its lookup takes; other keys are not held back', async () => {
    const slow = gate<Rule>();
    let first = true;
    const rule: RuleOf = (key) => {
      if (key === 'slow' && first) {
        first = false;
        return slow.promise;
      }
      return new Rule(1, 60_000);
    };
    const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule, onStoreError: 'allow', timeoutMs: 10_000, prefix: uniquePrefix('order') });
    const order: string[] = [];
    const one = limiter.tryAcquire('slow').then((decision) => (order.push('slow #1'), decision));
    const two = limiter.tryAcquire('slow').then((decision) => (order.push('slow #2'), decision));
    expect(await limiter.tryAcquire('other')).toMatchObject({ allowed: true });
    expect(order).toEqual([]);
    slow.open(new Rule(1, 60_000));
    expect(await one).toMatchObject({ allowed: true, limit: 1 });
    expect(await two).toMatchObject({ allowed: false, limit: 1 });
    expect(order).toEqual(['slow #1', 'slow #2']);
  });

  test('a rule function that throws or rejects rejects the call with what it threw; nothing is written, onError hears nothing', async () => {
    const onError = vi.fn();
    const thrown = new Error('no such tenant');
    const prefix = uniquePrefix('throws');
    const sync = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: () => { throw thrown; }, onStoreError: 'allow', onError, prefix });
    const async_ = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: () => Promise.reject(thrown), onStoreError: 'allow', onError, prefix, name: 'async' });
    for (const limiter of [sync, async_]) {
      await expect(limiter.tryAcquire('k')).rejects.toBe(thrown);
      await expect(limiter.peek('k')).rejects.toBe(thrown);
      await expect(limiter.reserve('k')).rejects.toBe(thrown);
      await expect(limiter.charge('k', 3)).rejects.toBe(thrown);
      await expect(limiter.block('k', 1000)).rejects.toBe(thrown);
      await expect(limiter.reset('k')).rejects.toBe(thrown);
    }
    expect(onError).not.toHaveBeenCalled();
    expect(await client.keys(`${prefix}*`)).toEqual([]);
  });

  test("an answer that is no rule rejects with new Rule's coded TypeError or RangeError; nothing is written", async () => {
    const prefix = uniquePrefix('no-rule');
    const onError = vi.fn();
    const answers: unknown[] = [undefined, 'ten a minute', { limit: 0, windowMs: 1000 }, Promise.resolve({ limit: 5, windowMs: 2 ** 43 })];
    const codes = ['ERR_RATEKEEPER_INVALID_ARGUMENT', 'ERR_RATEKEEPER_INVALID_ARGUMENT', 'ERR_RATEKEEPER_OUT_OF_RANGE', 'ERR_RATEKEEPER_OUT_OF_RANGE'];
    for (const [i, answer] of answers.entries()) {
      const limiter = new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule: (() => answer) as RuleOf, onStoreError: 'allow', onError, prefix, name: `n${i}` });
      const failure = await limiter.tryAcquire('k').catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(i < 2 ? TypeError : RangeError);
      expect(failure).toMatchObject({ code: codes[i] });
    }
    await expect(
      new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule: () => ({ limit: 0, windowMs: 1000 }) as Rule, onStoreError: 'allow', prefix, name: 'msg' }).tryAcquire('k'),
    ).rejects.toThrow('ratekeeper: `limit` must be a safe integer of at least 1, got 0');
    expect(onError).not.toHaveBeenCalled();
    expect(await client.keys(`${prefix}*`)).toEqual([]);
  });

  test('permits are checked against the key’s own rule', async () => {
    const limiter = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: async (key: string) => (key === 'big' ? new Rule(10, 1000) : new Rule(3, 1000)), onStoreError: 'deny', prefix: uniquePrefix('permits') });
    await expect(limiter.tryAcquire('small', 5)).rejects.toMatchObject({ name: 'RangeError', code: 'ERR_RATEKEEPER_OUT_OF_RANGE', message: 'ratekeeper: `permits` must be an integer from 1 to 3, got 5' });
    await expect(limiter.reserve('small', 4)).rejects.toThrow(RangeError);
    await expect(limiter.peek('small', 4)).rejects.toThrow(RangeError);
    expect(await limiter.tryAcquire('big', 5)).toMatchObject({ allowed: true, limit: 10, remaining: 5 });
    // A charge is never bounded by the limit.
    expect(await limiter.charge('small', 5)).toMatchObject({ limit: 3, remaining: 0 });
    await expect(limiter.tryAcquire('small', 1.5)).rejects.toThrow(RangeError);
  });

  test('a lookup that outlives timeoutMs: decisions, peeks and reservations are answered by the outage policy, marked store-timeout; operations reject with a RedisTimeoutError', async () => {
    const onError = vi.fn();
    const never = new Promise<Rule>(() => {});
    const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: () => never, onStoreError: 'deny', timeoutMs: 40, onError, prefix: uniquePrefix('slow-lookup') });
    // No rule is known: the policy answers as for a rule of these permits per timeoutMs.
    expect(await limiter.tryAcquire('k', 3)).toEqual({ allowed: false, limit: 3, remaining: 0, retryAfterMs: 40, resetAfterMs: 40, degraded: 'store-timeout' });
    expect(await limiter.peek('k', 0)).toMatchObject({ allowed: true, limit: 1, remaining: 0, degraded: 'store-timeout' });
    const reservation = await limiter.reserve('k');
    expect(reservation.decision).toMatchObject({ allowed: false, degraded: 'store-timeout' });
    const failure = await limiter.charge('k', 1).catch((error: unknown) => error);
    expect(failure).toMatchObject({ name: 'RedisTimeoutError', code: 'ERR_RATEKEEPER_STORE_TIMEOUT', timeoutMs: 40, message: 'ratekeeper: the rule function did not answer within 40 ms' });
    expect(onError).toHaveBeenCalledTimes(3);
    const allowing = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: () => never, onStoreError: 'allow', timeoutMs: 40, prefix: uniquePrefix('slow-lookup') });
    expect(await allowing.tryAcquire('k', 2)).toEqual({ allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: 40, degraded: 'store-timeout' });
  });

  test('when Redis fails after the lookup answered, the outage policy answers with the key’s own rule', async () => {
    const broken = { evalsha: () => Promise.reject(new Error('down')), eval: () => Promise.reject(new Error('down')) };
    const limiter = new RedisRateLimiter({ client: broken, algorithm: 'token-bucket', rule: async (key: string) => planOf(key), onStoreError: 'deny', onError: () => {} });
    expect(await limiter.tryAcquire('pro:x')).toMatchObject({ allowed: false, limit: 5, retryAfterMs: 720_000, degraded: 'store-error' });
    expect(await limiter.tryAcquire('free:x')).toMatchObject({ allowed: false, limit: 2, retryAfterMs: 30_000, degraded: 'store-error' });
  });

  test('with the refusal cache, a refusal under one rule never answers for the key under another', async () => {
    let rule = new Rule(1, 60_000);
    const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: () => rule, onStoreError: 'deny', refusalCache: true, prefix: uniquePrefix('refusals') });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, limit: 1 });
    rule = new Rule(5, 60_000);
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, limit: 5 });
  });

  test('limiter.rule is the function given; toJSON says the rule is per key', () => {
    const rule: RuleOf = (key) => planOf(key);
    const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule, onStoreError: 'allow', prefix: uniquePrefix('summary') });
    expect(limiter.rule).toBe(rule);
    expect(limiter.toJSON()).toMatchObject({ algorithm: 'fixed-window', rule: 'per key' });
    const fixed = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: Rule.perSecond(3), onStoreError: 'allow', prefix: uniquePrefix('summary') });
    expect(fixed.rule.limit).toBe(3);
  });

  test('a rule function claims every rule’s keys: a fixed-rule limiter under the same prefix and algorithm is reported', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const prefix = uniquePrefix('overlap');
    new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: (key: string) => planOf(key), onStoreError: 'allow', prefix });
    new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: Rule.perMinute(2), onStoreError: 'allow', prefix });
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toContain('RedisRateLimiter');
  });

  test('the HTTP middleware advertises each key’s own window (w); decisions stay deep-equal to the twin’s', async () => {
    const clock = new ManualClock(0);
    const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: async (key: string) => planOf(key), onStoreError: 'deny', clock, prefix: uniquePrefix('http-w') });
    let seen: Decision | undefined;
    const handler = withRateLimit({ limiter, key: (request: Request) => new URL(request.url).pathname.slice(1), windowMs: 1000 }, () => new Response('ok'));
    const free = await handler(new Request('http://localhost/free:a'));
    const pro = await handler(new Request('http://localhost/pro:b'));
    expect(free.headers.get('RateLimit-Policy')).toBe('"default";q=2;w=60');
    expect(pro.headers.get('RateLimit-Policy')).toBe('"default";q=5;w=3600');
    seen = await limiter.tryAcquire('pro:b');
    const twin = new KeyedRateLimiter({ algorithm: () => new twins['fixed-window'](plans.pro!), clock });
    twin.tryAcquire('pro:b');
    expect(seen).toStrictEqual(twin.tryAcquire('pro:b'));
  });
});
