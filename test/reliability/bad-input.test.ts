import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket, type Clock } from '../../src/index';
import { algorithms } from '../support/algorithms';
import { rangeError } from '../../src/core/errors';

// Bad input anywhere gets a TypeError or RangeError that names the value, and nothing half-written:
// the limiter's other keys decide exactly as they would have without the bad call.

const badNumbers = [Number.NaN, Infinity, -Infinity, -1, 0, 0.5, 2 ** 53, '1', null, undefined, {}, [], 1n, Symbol('x')];

describe('Rule', () => {
  it.each(badNumbers.map((v) => [v]))('rejects %s as a limit and as a window', (value) => {
    const name = typeof value === 'symbol' ? 'Symbol(x)' : typeof value === 'bigint' ? '1n' : undefined;
    for (const make of [() => new Rule(value as number, 1000), () => Rule.perMinute(value as number)]) {
      expect(make).toThrow(typeof value === 'number' ? RangeError : TypeError);
      expect(make).toThrow(name ?? (typeof value === 'number' ? String(value) : /got/));
    }
    expect(() => new Rule(1, value as number)).toThrow(/`windowMs`/);
  });

  test.prop([fc.anything(), fc.anything()])('any pair of values either makes a valid rule or throws a TypeError or RangeError', (limit, windowMs) => {
    let rule: Rule | undefined;
    try {
      rule = new Rule(limit as number, windowMs as number);
    } catch (error) {
      expect(error instanceof TypeError || error instanceof RangeError).toBe(true);
      expect((error as Error).message).toMatch(/^ratekeeper: `(limit|windowMs)` must be /);
      return;
    }
    expect(Number.isSafeInteger(rule.limit) && rule.limit >= 1).toBe(true);
    expect(Number.isInteger(rule.windowMs) && rule.windowMs >= 1 && rule.windowMs <= Rule.MAX_WINDOW_MS).toBe(true);
  });
});

describe('KeyedRateLimiter options', () => {
  test.prop([fc.anything()])('any options object either makes a limiter or throws a TypeError or RangeError', (options) => {
    try {
      new KeyedRateLimiter(options as never);
    } catch (error) {
      expect(error instanceof TypeError || error instanceof RangeError).toBe(true);
      expect((error as Error).message).toMatch(/^ratekeeper: /);
    }
  });
});

describe.each(algorithms)('a keyed $name under bad calls', ({ make }) => {
  const badCalls: [string, (limiter: KeyedRateLimiter) => unknown][] = [
    ['a number key', (l) => l.tryAcquire(7 as unknown as string)],
    ['an object key', (l) => l.tryAcquire({} as unknown as string)],
    ['permits NaN', (l) => l.tryAcquire('fresh', Number.NaN)],
    ['permits above the limit', (l) => l.tryAcquire('a', 4)],
    ['fractional permits', (l) => l.tryAcquire('a', 1.5)],
    ['negative permits', (l) => l.tryAcquire('fresh', -2)],
    ['a string for permits', (l) => l.tryAcquire('a', '2' as unknown as number)],
  ];

  it.each(badCalls)('refuses %s, and the other keys decide exactly as before', (_, call) => {
    const clock = new ManualClock(1_000);
    const rule = new Rule(3, 1000);
    const limiter = new KeyedRateLimiter({ algorithm: () => make(rule), clock });
    const twin = new KeyedRateLimiter({ algorithm: () => make(rule), clock });
    for (const l of [limiter, twin]) l.tryAcquire('a', 2);
    expect(() => call(limiter)).toThrow(/^ratekeeper: `(key|permits)` must be /);
    expect(limiter.size).toBe(twin.size);
    for (const dt of [0, 100, 400, 1000]) {
      clock.advance(dt);
      for (const key of ['a', 'fresh', 'b']) expect(limiter.tryAcquire(key)).toEqual(twin.tryAcquire(key));
    }
  });

  it('treats empty, 1 MB and unicode keys as ordinary, distinct keys', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => make(new Rule(1, 1000)), clock: new ManualClock() });
    const keys = ['', 'x'.repeat(1 << 20), '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🚦', 'e\u0301', '\u00e9', '__proto__', 'constructor'];
    for (const key of keys) expect(limiter.tryAcquire(key).allowed).toBe(true);
    for (const key of keys) expect(limiter.tryAcquire(key).allowed).toBe(false);
    expect(limiter.size).toBe(keys.length);
  });
});

describe('a clock that misbehaves', () => {
  it('refuses a NaN or infinite reading with a RangeError and stores nothing', () => {
    let reading = Number.NaN;
    const clock: Clock = { now: () => reading };
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock });
    expect(() => limiter.tryAcquire('a')).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got NaN'));
    reading = Infinity;
    expect(() => limiter.tryAcquire('a')).toThrow(RangeError);
    expect(limiter.size).toBe(0);
    reading = 0;
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: true, remaining: 1 });
  });

  it('refuses a reading past 2^53 (a nanosecond clock read as milliseconds), which no decision could be exact for', () => {
    let reading = 1.76e18;
    const clock: Clock = { now: () => reading };
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(5)), clock });
    expect(() => limiter.tryAcquire('a')).toThrow(
      rangeError('ratekeeper: `nowMs` must be a reading in milliseconds from -(2^53 - 1) to 2^53 - 1, got 1760000000000000000'),
    );
    reading = -(2 ** 53);
    expect(() => limiter.tryAcquire('a')).toThrow(RangeError);
    expect(limiter.size).toBe(0);
    reading = Number.MAX_SAFE_INTEGER;
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: true, remaining: 4, resetAfterMs: 12_000 });
  });

  it('that runs backwards grants nothing extra', () => {
    const clock = new ManualClock(10_000);
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock });
    limiter.tryAcquire('a', 2);
    clock.set(0);
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: false, retryAfterMs: 500 });
    clock.set(10_499);
    expect(limiter.tryAcquire('a').allowed).toBe(false);
    clock.set(10_500);
    expect(limiter.tryAcquire('a').allowed).toBe(true);
  });
});
