import { describe, expect, it } from 'vitest';
import { Composite, FixedWindow, ManualClock, Rule, SlidingWindowCounter, SlidingWindowLog, systemClock, TokenBucket } from '../../src/index';
import { rangeError, typeError } from '../../src/core/errors';

describe('Rule', () => {
  it('reads limit and window, with per-second, per-minute and per-hour shorthands', () => {
    expect(Rule.perSecond(5)).toMatchObject({ limit: 5, windowMs: 1000 });
    expect(Rule.perMinute(5)).toMatchObject({ limit: 5, windowMs: 60_000 });
    expect(Rule.perHour(5)).toMatchObject({ limit: 5, windowMs: 3_600_000 });
    expect(new Rule(3, 1)).toMatchObject({ limit: 3, windowMs: 1 });
  });

  it.each([0, -1, 1.5, Number.NaN, Infinity, 2 ** 53])('refuses limit %s with a RangeError naming it', (limit) => {
    expect(() => new Rule(limit, 1000)).toThrow(
      rangeError(`ratekeeper: \`limit\` must be a safe integer of at least 1, got ${limit}`),
    );
  });

  it.each([0, -5, 2.5, 2 ** 42 + 1, Number.NaN, Infinity])('refuses windowMs %s with a RangeError naming it', (windowMs) => {
    expect(() => new Rule(1, windowMs)).toThrow(
      rangeError(`ratekeeper: \`windowMs\` must be an integer from 1 to 4398046511104, got ${windowMs}`),
    );
  });

  it('refuses values that are not numbers with a TypeError', () => {
    expect(() => new Rule('10' as unknown as number, 1000)).toThrow(typeError('ratekeeper: `limit` must be a number, got "10"'));
    expect(() => new Rule(10, undefined as unknown as number)).toThrow(
      typeError('ratekeeper: `windowMs` must be a number, got undefined'),
    );
  });
});

describe('a rule is read by its fields, never by instanceof', () => {
  // The ESM and CommonJS builds each carry a Rule class; a rule made by one must work in the other
  // (test/package runs the two builds in one process). A plain object stands in for the other copy here.
  const algorithms = [TokenBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter];

  it.each(algorithms.map((A) => [A.name, A] as const))('%s takes any { limit, windowMs } and decides as with a Rule', (_, Algorithm) => {
    const plain = new Algorithm({ limit: 2, windowMs: 1000 } as Rule);
    const real = new Algorithm(new Rule(2, 1000));
    for (const at of [0, 1, 2, 500, 1000]) expect(plain.tryAcquire(at)).toStrictEqual(real.tryAcquire(at));
  });

  it.each(algorithms.map((A) => [A.name, A] as const))('%s checks the fields as new Rule does, naming them', (_, Algorithm) => {
    expect(() => new Algorithm({ limit: 0, windowMs: 1000 } as Rule)).toThrow(rangeError('ratekeeper: `limit` must be a safe integer of at least 1, got 0'));
    expect(() => new Algorithm({ limit: 1, windowMs: -1 } as Rule)).toThrow(rangeError('ratekeeper: `windowMs` must be an integer from 1 to 4398046511104, got -1'));
    expect(() => new Algorithm({ limit: '5', windowMs: 1000 } as never)).toThrow(
      typeError('ratekeeper: `rule` must be a Rule (or { limit, windowMs }), e.g. Rule.perSecond(10), got an object'),
    );
    expect(() => new Algorithm(null as never)).toThrow(typeError('ratekeeper: `rule` must be a Rule (or { limit, windowMs }), e.g. Rule.perSecond(10), got null'));
  });

  it('keeps a copy: changing the object later changes nothing', () => {
    const rule = { limit: 2, windowMs: 1000 };
    const bucket = new FixedWindow(rule as Rule);
    rule.limit = 100;
    expect(bucket.tryAcquire(0, 2).remaining).toBe(0);
    expect(bucket.tryAcquire(0).allowed).toBe(false);
  });

  it.each(algorithms.map((A) => [A.name, A] as const))('%s reads an object changed since the last state was built anew: checked, never a stale rule', (_, Algorithm) => {
    const config = { limit: 2, windowMs: 1000 };
    expect(new Algorithm(config as Rule).tryAcquire(0).remaining).toBe(1);
    config.limit = 5; // the same object, changed for the keys still to come
    expect(new Algorithm(config as Rule).tryAcquire(0)).toMatchObject({ limit: 5, remaining: 4 });
    config.limit = 0;
    expect(() => new Algorithm(config as Rule)).toThrow(rangeError('ratekeeper: `limit` must be a safe integer of at least 1, got 0'));
    let reads = 0;
    const drifting = { get limit() { return ++reads; }, windowMs: 1000 }; // a getter that answers anew each read
    const state = new Algorithm(drifting as Rule);
    expect(state.tryAcquire(0)).toMatchObject({ limit: 1, remaining: 0 });
    expect(new Algorithm(drifting as Rule).tryAcquire(0)).toMatchObject({ limit: 2, remaining: 1 });
  });

  it('a composite is known by its parts, so one from the other build is flattened too', () => {
    const a = new TokenBucket(Rule.perSecond(2));
    const inner = new Composite([a, new FixedWindow(Rule.perSecond(5))]);
    const foreign = { parts: inner.parts, tryAcquire: inner.tryAcquire.bind(inner), peek: inner.peek.bind(inner), isIdle: inner.isIdle.bind(inner) };
    expect(new Composite([foreign, new SlidingWindowLog(Rule.perMinute(9))]).parts).toHaveLength(3);
    expect(() => new Composite([foreign, a])).toThrow(typeError('ratekeeper: `parts` holds the same algorithm twice; give each part its own instance'));
  });
});

describe('ManualClock', () => {
  it('moves only when told to', () => {
    const clock = new ManualClock(10);
    expect(clock.now()).toBe(10);
    expect(clock.advance(5)).toBe(15);
    clock.set(3);
    expect(clock.now()).toBe(3);
    expect(new ManualClock().now()).toBe(0);
  });

  it('refuses a negative or non-finite step and a non-finite time', () => {
    const clock = new ManualClock();
    expect(() => clock.advance(-1)).toThrow(rangeError('ratekeeper: `ms` must be a finite number of at least 0, got -1'));
    expect(() => clock.advance(Number.NaN)).toThrow(RangeError);
    expect(() => clock.set(Infinity)).toThrow(rangeError('ratekeeper: `ms` must be a finite number, got Infinity'));
    expect(() => new ManualClock(Number.NaN)).toThrow(RangeError);
    expect(clock.now()).toBe(0);
  });
});

describe('systemClock', () => {
  it('reads whole epoch milliseconds that never decrease', () => {
    let previous = systemClock.now();
    expect(Math.abs(previous - Date.now())).toBeLessThan(1000);
    for (let i = 0; i < 10_000; i++) {
      const now = systemClock.now();
      expect(Number.isInteger(now)).toBe(true);
      expect(now).toBeGreaterThanOrEqual(previous);
      previous = now;
    }
  });
});
