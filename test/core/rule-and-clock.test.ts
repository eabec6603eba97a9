import { describe, expect, it } from 'vitest';
import { ManualClock, Rule, systemClock } from '../../src/index';

describe('Rule', () => {
  it('reads limit and window, with per-second, per-minute and per-hour shorthands', () => {
    expect(Rule.perSecond(5)).toMatchObject({ limit: 5, windowMs: 1000 });
    expect(Rule.perMinute(5)).toMatchObject({ limit: 5, windowMs: 60_000 });
    expect(Rule.perHour(5)).toMatchObject({ limit: 5, windowMs: 3_600_000 });
    expect(new Rule(3, 2.5)).toMatchObject({ limit: 3, windowMs: 2.5 });
  });

  it.each([0, -1, 1.5, Number.NaN, Infinity, 2 ** 53])('refuses limit %s with a RangeError naming it', (limit) => {
    expect(() => new Rule(limit, 1000)).toThrow(
      new RangeError(`ratekeeper: \`limit\` must be a safe integer of at least 1, got ${limit}`),
    );
  });

  it.each([0, -5, Number.NaN, Infinity])('refuses windowMs %s with a RangeError naming it', (windowMs) => {
    expect(() => new Rule(1, windowMs)).toThrow(
      new RangeError(`ratekeeper: \`windowMs\` must be a positive finite number, got ${windowMs}`),
    );
  });

  it('refuses values that are not numbers with a TypeError', () => {
    expect(() => new Rule('10' as unknown as number, 1000)).toThrow(new TypeError('ratekeeper: `limit` must be a number, got "10"'));
    expect(() => new Rule(10, undefined as unknown as number)).toThrow(
      new TypeError('ratekeeper: `windowMs` must be a number, got undefined'),
    );
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
    expect(() => clock.advance(-1)).toThrow(new RangeError('ratekeeper: `ms` must be a finite number of at least 0, got -1'));
    expect(() => clock.advance(Number.NaN)).toThrow(RangeError);
    expect(() => clock.set(Infinity)).toThrow(new RangeError('ratekeeper: `ms` must be a finite number, got Infinity'));
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
