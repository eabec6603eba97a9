// Examples of peek, reset, charge, reserve/settle and block on KeyedRateLimiter (blocks kept apart in
// src/limiter/key-blocks.ts), and how waiting follows them. The laws themselves are checked on random traffic in managing-keys.test.ts.
import { describe, expect, it } from 'vitest';
import {
  Composite,
  FixedWindow,
  KeyedRateLimiter,
  ManualClock,
  ManualScheduler,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  type RateLimitAlgorithm,
} from '../../src/index';
import { rangeError, typeError } from '../../src/core/errors';
import { algorithms } from '../support/algorithms';

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

const limiterOf = (algorithm: () => RateLimitAlgorithm, clock = new ManualClock()) => ({ limiter: new KeyedRateLimiter({ algorithm, clock }), clock });

describe('what debt looks like in each algorithm (10 per second, 25 charged at 0)', () => {
  const rule = Rule.perSecond(10);

  it('TokenBucket: the bucket goes 10 below empty (the bound; 5 are forgiven), repaid by refill', () => {
    const { limiter, clock } = limiterOf(() => new TokenBucket(rule));
    expect(limiter.charge('k', 25)).toEqual({ allowed: true, limit: 10, remaining: 0, retryAfterMs: 0, resetAfterMs: 2000 });
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 1100 });
    clock.set(1100);
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('FixedWindow: refused until the window ends, whatever the amount; the next window starts clean', () => {
    const { limiter, clock } = limiterOf(() => new FixedWindow(rule));
    clock.set(400);
    expect(limiter.charge('k', 25)).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 600 });
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 600 });
    clock.set(1000);
    expect(limiter.tryAcquire('k', 10)).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('SlidingWindowLog: 20 permits logged now (the bound) as one grant, all leaving one window later', () => {
    const { limiter, clock } = limiterOf(() => new SlidingWindowLog(rule));
    expect(limiter.charge('k', 25)).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 1000 });
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    clock.set(1000);
    expect(limiter.tryAcquire('k', 10)).toMatchObject({ allowed: true });
  });

  it('SlidingWindowCounter: the count reaches 20 (the bound) and weighs on the next window as the previous count', () => {
    const { limiter, clock } = limiterOf(() => new SlidingWindowCounter(rule));
    expect(limiter.charge('k', 25)).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 2000 });
    // In the next window the estimate is 20·(1000 - elapsed)/1000: one permit fits once it is 9.
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1550 });
    clock.set(1550);
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
  });
});

describe.each(algorithms)('$name: a charge of Number.MAX_SAFE_INTEGER', ({ make }) => {
  it('is bounded: no overflow, refused for at most two windows, then as new', () => {
    const rule = new Rule(997, 60_000);
    const { limiter, clock } = limiterOf(() => make(rule));
    clock.set(1_764_000_000_123);
    const decision = limiter.charge('k', Number.MAX_SAFE_INTEGER);
    expect(decision).toMatchObject({ allowed: true, remaining: 0 });
    expect(decision.resetAfterMs).toBeLessThanOrEqual(2 * rule.windowMs);
    clock.advance(decision.resetAfterMs);
    expect(limiter.tryAcquire('k', rule.limit)).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('peek checks permits as tryAcquire does', () => {
    const { limiter } = limiterOf(() => make(new Rule(10, 1000)));
    for (const permits of [11, -1, 1.5, Number.NaN]) {
      expect(() => limiter.peek('k', permits)).toThrow(rangeError(`ratekeeper: \`permits\` must be an integer from 1 to 10, got ${permits}`));
    }
    expect(limiter.size).toBe(0);
  });
});

describe('refunds', () => {
  it('a refund after the window ended gives nothing back (FixedWindow)', () => {
    const { limiter, clock } = limiterOf(() => new FixedWindow(Rule.perSecond(10)));
    clock.set(900);
    const reservation = limiter.reserve('k', 8);
    clock.set(1100);
    limiter.tryAcquire('k', 9);
    expect(reservation.settle(0)).toMatchObject({ remaining: 1 }); // the 8 left with their window
  });

  it('a late refund credits only what refill has not repaid (TokenBucket: spend 5 of 10, refill, spend 8, refund 5)', () => {
    const { limiter, clock } = limiterOf(() => new TokenBucket(Rule.perSecond(10)));
    const reservation = limiter.reserve('k', 5);
    clock.set(500); // refilled to full
    limiter.tryAcquire('k', 8);
    expect(reservation.settle(0)).toMatchObject({ remaining: 2 }); // a plain clamp would say 7
  });

  it('gives nothing back after the key was reset, or after a charge reached the debt bound', () => {
    const { limiter } = limiterOf(() => new TokenBucket(Rule.perSecond(10)));
    const beforeReset = limiter.reserve('k', 5);
    limiter.reset('k');
    limiter.tryAcquire('k', 4);
    expect(beforeReset.settle(0)).toMatchObject({ remaining: 6 });
    const beforeDebt = limiter.reserve('k', 5);
    limiter.charge('k', 100); // 10 in debt, the rest forgiven: the 5 reserved may be what was forgiven
    beforeDebt.cancel();
    expect(limiter.peek('k', 0)).toMatchObject({ remaining: 0, resetAfterMs: 2000 });
  });

  it('a Composite reserves, charges and refunds in every part', () => {
    const { limiter, clock } = limiterOf(() => new Composite([new TokenBucket(Rule.perSecond(10)), new FixedWindow(Rule.perMinute(50))]));
    const reservation = limiter.reserve('k', 10);
    expect(reservation.decision).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    clock.set(500);
    expect(reservation.settle(4)).toMatchObject({ limit: 10, remaining: 10 });
    // Both parts in debt now; the bucket's is repaid in 1100 ms, the window's at the minute.
    expect(limiter.charge('k', 46)).toMatchObject({ remaining: 0, resetAfterMs: 59_500 });
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 59_500 });
  });
});

describe('block', () => {
  it('refuses for its length, never shortened, lifted only by reset, and survives a refund or charge', () => {
    const { limiter, clock } = limiterOf(() => new TokenBucket(Rule.perSecond(10)));
    const reservation = limiter.reserve('k', 5);
    limiter.block('k', 60_000);
    limiter.block('k', 1000);
    reservation.cancel();
    limiter.charge('k', 1);
    clock.set(30_000);
    expect(limiter.tryAcquire('k')).toEqual({ allowed: false, limit: 10, remaining: 0, retryAfterMs: 30_000, resetAfterMs: 30_000 });
    expect(limiter.peek('k', 0)).toMatchObject({ allowed: false, retryAfterMs: 30_000 });
    limiter.reset('k');
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 9 });
  });

  it('blocks a key never seen without storing it, and keeps a blocked key from being reclaimed', () => {
    const { limiter, clock } = limiterOf(() => new TokenBucket(Rule.perSecond(10)));
    limiter.block('new', 5000);
    expect(limiter.tryAcquire('new')).toMatchObject({ allowed: false, retryAfterMs: 5000 });
    expect(limiter.size).toBe(0);
    limiter.tryAcquire('old');
    limiter.block('old', 5000);
    clock.set(4999);
    expect(limiter.evictIdle()).toBe(0);
    clock.set(5000);
    expect(limiter.evictIdle()).toBe(1);
    expect(limiter.tryAcquire('new')).toMatchObject({ allowed: true });
  });

  it('checks its arguments', () => {
    const { limiter } = limiterOf(() => new TokenBucket(Rule.perSecond(10)));
    expect(() => limiter.block('k', -1)).toThrow(rangeError('ratekeeper: `durationMs` must be an integer from 0 to 4398046511104, got -1'));
    expect(() => limiter.block('k', Infinity)).toThrow(RangeError);
    expect(() => limiter.block(1 as never, 10)).toThrow(typeError('ratekeeper: `key` must be a string, got 1'));
    expect(() => limiter.charge('k', 0)).toThrow(rangeError('ratekeeper: `permits` must be a safe integer of at least 1, got 0'));
    expect(() => limiter.reserve('k', 11)).toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 10, got 11'));
    expect(() => limiter.reserve('k').settle(-1)).toThrow(rangeError('ratekeeper: `actualPermits` must be a safe integer of at least 0, got -1'));
    expect(limiter.peek('k', 0)).toMatchObject({ allowed: true, remaining: 9 }); // the bad settle changed nothing
  });
});

describe('operations need an algorithm that keeps accounts', () => {
  it('throws a TypeError naming the missing method for a custom algorithm', () => {
    const custom = { tryAcquire: () => ({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0 }) as const, isIdle: () => true };
    const { limiter } = limiterOf(() => custom);
    expect(() => limiter.charge('k', 1)).toThrow(typeError('ratekeeper: charge needs an algorithm with a charge() method; the factory\'s algorithm has none'));
    expect(() => limiter.peek('k')).toThrow(TypeError);
    expect(limiter.size).toBe(0);
  });

  it('charges a new key even into debt; a full table of active keys loses the charge and says so with a refusal', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: new ManualClock(), maxKeys: 1 });
    limiter.charge('a', 1);
    expect(limiter.charge('b', 1)).toMatchObject({ allowed: false, remaining: 0, degraded: 'key-table-full' });
    expect(limiter.size).toBe(1);
  });
});

describe('waiting', () => {
  const bucket = () => new TokenBucket(Rule.perSecond(1));

  it('waits out a block, then is granted', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket, clock: scheduler });
    limiter.block('k', 5000);
    let decision;
    void limiter.acquire('k').then((d) => (decision = d));
    scheduler.advance(4999);
    await flush();
    expect(decision).toBeUndefined();
    scheduler.advance(1);
    await flush();
    expect(decision).toMatchObject({ allowed: true });
  });

  it('is woken at once by a reset or a refund that makes room', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket, clock: scheduler });
    const reservation = limiter.reserve('k');
    const afterRefund = limiter.acquire('k');
    reservation.cancel();
    await expect(afterRefund).resolves.toMatchObject({ allowed: true });
    const afterReset = limiter.acquire('k');
    limiter.reset('k');
    await expect(afterReset).resolves.toMatchObject({ allowed: true });
  });

  it('refuses at once beyond maxWaiters per key, saying why', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket, clock: scheduler, maxWaiters: 2 });
    limiter.tryAcquire('k');
    const first = limiter.acquire('k');
    const second = limiter.acquire('k');
    await expect(limiter.acquire('k')).resolves.toEqual({ allowed: false, limit: 1, remaining: 0, retryAfterMs: 1000, resetAfterMs: 1000, degraded: 'queue-full' });
    await expect(limiter.acquire('other')).resolves.toMatchObject({ allowed: true });
    scheduler.advance(1000);
    await expect(first).resolves.toMatchObject({ allowed: true });
    expect(() => new KeyedRateLimiter({ algorithm: bucket, maxWaiters: 0 })).toThrow(
      rangeError('ratekeeper: `maxWaiters` must be a safe integer of at least 1, got 0'),
    );
    scheduler.advance(1000);
    await expect(second).resolves.toMatchObject({ allowed: true });
  });
});
