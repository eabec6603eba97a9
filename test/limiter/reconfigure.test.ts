import { fc, test } from '@fast-check/vitest';
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
  type PeekableAlgorithm,
  type RateLimitAlgorithm,
} from '../../src/index';
import { carryOver } from '../../src/limiter/carry-over';
import { algorithms, boundName, composites, type Grant, worstExcess } from '../support/algorithms';
import { typeError } from '../../src/core/errors';

const ruleArb = (minLimit: number) =>
  fc
    .record({ limit: fc.integer({ min: minLimit, max: 8 }), windowMs: fc.oneof(fc.constantFrom(1000, 60_000, 7), fc.integer({ min: 1, max: 4000 })) })
    .map(({ limit, windowMs }) => new Rule(limit, windowMs));

const stepsArb = (rule: Rule) =>
  fc.array(
    fc.record({ dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2 * rule.windowMs })), permits: fc.integer({ min: 1, max: rule.limit }) }),
    { maxLength: 25, size: 'max' }, // fast-check would keep arrays to ~10 elements otherwise
  );

/** Traffic under one algorithm and rule, a switch to another algorithm and rule, then traffic under the new one. */
const switchArb = fc
  .record({ from: fc.constantFrom(...algorithms), to: fc.constantFrom(...algorithms), ruleA: ruleArb(1), ruleB: ruleArb(1) })
  .chain((pair) => fc.record({ pair: fc.constant(pair), before: stepsArb(pair.ruleA), gap: fc.integer({ min: 0, max: 3000 }), after: stepsArb(pair.ruleB) }));

/** Whole permits a state has now, read without spending. */
const availableNow = (state: PeekableAlgorithm, now: number) => {
  const probe = state.peek(now, 1);
  return probe.allowed ? probe.remaining + 1 : probe.remaining;
};

describe('reconfigure', () => {
  test.prop([switchArb])(
    'no burst beyond the new rule: what the key had used, counted at the switch, plus all granted after it, obeys the new rule',
    ({ pair: { from, to, ruleA, ruleB }, before, gap, after }) => {
      const clock = new ManualClock(1_764_000_000_123);
      const limiter = new KeyedRateLimiter({ algorithm: () => from.make(ruleA), clock });
      const twin = from.make(ruleA); // what the key's state is, read without touching the limiter
      for (const { dt, permits } of before) {
        clock.advance(dt);
        expect(limiter.tryAcquire('k', permits)).toEqual(twin.tryAcquire(clock.now(), permits));
      }
      const switchedAt = clock.advance(gap);
      const carried = Math.min(ruleA.limit - availableNow(twin, switchedAt), ruleB.limit);
      limiter.reconfigure(() => to.make(ruleB));
      // Nothing spent is lost, and a raised limit is there at once: exactly the new limit minus what was used.
      const first = limiter.tryAcquire('k');
      expect(first).toMatchObject({ allowed: carried < ruleB.limit, limit: ruleB.limit, remaining: Math.max(0, ruleB.limit - carried - 1) });
      const grants: Grant[] = carried > 0 ? [{ at: switchedAt, permits: carried }] : [];
      if (first.allowed) grants.push({ at: switchedAt, permits: 1 });
      for (const { dt, permits } of after) {
        clock.advance(dt);
        if (limiter.tryAcquire('k', permits).allowed) grants.push({ at: clock.now(), permits });
      }
      expect(worstExcess(to.bound, ruleB, grants), boundName(to.bound)).toBeLessThanOrEqual(0);
    },
  );

  const cases = [...algorithms, ...composites];
  const opArb = fc.oneof(
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('acquire' as const), key: fc.integer({ min: 0, max: 24 }), dt: fc.integer({ min: 0, max: 300 }), permits: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('evict' as const), dt: fc.integer({ min: 0, max: 700 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('reconfigure' as const), dt: fc.integer({ min: 0, max: 700 }), to: fc.constantFrom(...cases), rule: ruleArb(3) }) },
  );

  test.prop([fc.constantFrom(...cases), ruleArb(3), fc.array(opArb, { maxLength: 200, size: 'max' })])(
    'carrying keys over lazily decides exactly as converting every key at the moment of the switch',
    (start, rule, ops) => {
      const clock = new ManualClock(1_000_000);
      let make = () => start.make(rule);
      const limiter = new KeyedRateLimiter({ algorithm: () => make(), clock });
      const eager = new Map<string, RateLimitAlgorithm>();
      for (const op of ops) {
        clock.advance(op.dt);
        if (op.kind === 'evict') limiter.evictIdle();
        else if (op.kind === 'reconfigure') {
          const next = () => op.to.make(op.rule);
          for (const [key, state] of eager) {
            const fresh = next();
            if (carryOver(state, fresh, clock.now())) eager.set(key, fresh);
          }
          make = next;
          limiter.reconfigure(next);
        } else {
          const key = `k${op.key}`;
          if (!eager.has(key)) eager.set(key, make());
          expect(limiter.tryAcquire(key, op.permits)).toEqual(eager.get(key)?.tryAcquire(clock.now(), op.permits));
        }
      }
    },
  );

  it('carries a composite over part by part: the hourly part keeps its hour when the per-second part changes', () => {
    const clock = new ManualClock();
    const hourly = new Rule(5, 3_600_000);
    const limiter = new KeyedRateLimiter({ algorithm: () => new Composite([new TokenBucket(Rule.perSecond(2)), new SlidingWindowLog(hourly)]), clock });
    limiter.tryAcquire('k', 2);
    clock.advance(1000);
    limiter.tryAcquire('k', 2);
    limiter.reconfigure(() => new Composite([new TokenBucket(Rule.perSecond(4)), new SlidingWindowLog(hourly)]));
    // The hour's four hits count as spent at the switch, so they leave an hour after it.
    expect(limiter.tryAcquire('k', 2)).toMatchObject({ allowed: false, limit: 5, remaining: 1, retryAfterMs: 3_600_000 });
    expect(limiter.tryAcquire('k', 1)).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('carries what each part used when parts are removed: the hourly part alone keeps the 60 spent', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: () => new Composite([new TokenBucket(Rule.perSecond(10)), new SlidingWindowLog(Rule.perHour(100))]), clock });
    for (let s = 0; s < 6; s++) {
      expect(limiter.tryAcquire('k', 10).allowed).toBe(true);
      clock.advance(1000);
    }
    limiter.reconfigure(() => new SlidingWindowLog(Rule.perHour(100)));
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, limit: 100, remaining: 39 });
  });

  it('never lets an added part forgive: a daily part added to an unchanged 100 per hour takes what the hour counted', () => {
    const clock = new ManualClock();
    const hourly = () => new SlidingWindowLog(Rule.perHour(100));
    const limiter = new KeyedRateLimiter({ algorithm: () => new Composite([new TokenBucket(Rule.perSecond(10)), hourly()]), clock });
    let granted = 0;
    const spendFor = (ms: number) => {
      for (const end = clock.now() + ms; clock.now() < end; clock.advance(100)) if (limiter.tryAcquire('k').allowed) granted++;
    };
    spendFor(30 * 60_000);
    limiter.reconfigure(() => new Composite([new TokenBucket(Rule.perSecond(10)), hourly(), new SlidingWindowLog(new Rule(1000, 86_400_000))]));
    spendFor(30 * 60_000 - 1000);
    expect(granted).toBe(100); // all within one hour: never more than the unchanged 100 per hour
  });

  it('matches parts by kind, not position: the same composite listed in another order forgives nothing', () => {
    const clock = new ManualClock();
    const perSecond = () => new TokenBucket(Rule.perSecond(10));
    const hourly = () => new SlidingWindowLog(Rule.perHour(100));
    const limiter = new KeyedRateLimiter({ algorithm: () => new Composite([perSecond(), hourly()]), clock });
    for (let s = 0; s < 6; s++) {
      expect(limiter.tryAcquire('k', 10).allowed).toBe(true);
      clock.advance(1000);
    }
    // The per-second part is full again; the hour counted 60. Listed the other way round, each part keeps its own.
    limiter.reconfigure(() => new Composite([hourly(), perSecond()]));
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, limit: 10, remaining: 9 });
    for (const permits of [10, 10, 10, 9]) {
      clock.advance(1000);
      expect(limiter.tryAcquire('k', permits).allowed).toBe(true);
    }
    clock.advance(1000);
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, limit: 100, remaining: 0 }); // 100 in the hour
  });

  it('carries a single algorithm into a composite: each new part takes what the old one used', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(Rule.perHour(100)), clock });
    limiter.tryAcquire('k', 70);
    limiter.reconfigure(() => new Composite([new TokenBucket(Rule.perSecond(10)), new SlidingWindowLog(Rule.perHour(100))]));
    // The per-second part has no match and takes the most used, as a charge: 70, past its debt bound
    // of 20, leaves it 10 in debt (a second to repay); the hour keeps its 70.
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, limit: 10, remaining: 0, retryAfterMs: 1100 });
    clock.advance(1000);
    expect(limiter.tryAcquire('k', 10).allowed).toBe(false);
    for (let s = 0; s < 3; s++) {
      clock.advance(1000);
      expect(limiter.tryAcquire('k', 10).allowed).toBe(true);
    }
    clock.advance(1000);
    expect(limiter.tryAcquire('k', 10)).toMatchObject({ allowed: false, limit: 100, remaining: 0 });
  });

  it('keeps what each key spent when the sweep carries keys over as new keys arrive', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(2)), clock });
    for (let i = 0; i < 100; i++) limiter.tryAcquire(`old${i}`, 2);
    limiter.reconfigure(() => new TokenBucket(Rule.perMinute(4)));
    for (let i = 0; i < 100; i++) limiter.tryAcquire(`new${i}`); // each examines two old keys
    expect(limiter.size).toBe(200);
    for (let i = 0; i < 100; i++) {
      expect(limiter.tryAcquire(`old${i}`, 3)).toMatchObject({ allowed: false, limit: 4, remaining: 2 });
    }
  });

  it('makes a raised limit available at once, and a lowered one refuses until the spent permits drain, past the new limit as debt', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(10)), clock });
    limiter.tryAcquire('up', 8);
    limiter.tryAcquire('down', 8);
    limiter.reconfigure((key) => new TokenBucket(Rule.perSecond(key === 'up' ? 20 : 4)));
    expect(limiter.tryAcquire('up', 12)).toMatchObject({ allowed: true, remaining: 0 });
    // 8 spent under 4 per second: 4 over the new limit, carried as debt, repaid before the next token.
    expect(limiter.tryAcquire('down')).toMatchObject({ allowed: false, limit: 4, retryAfterMs: 1250 });
  });

  it('touches no key when it switches, and tries waiting callers again at once under the new rule', async () => {
    const scheduler = new ManualScheduler();
    let built = 0;
    const limiter = new KeyedRateLimiter({ algorithm: () => (built++, new TokenBucket(Rule.perMinute(1))), clock: scheduler });
    for (let i = 0; i < 1000; i++) limiter.tryAcquire(`k${i}`);
    const waiting = limiter.acquire('k0');
    built = 0;
    limiter.reconfigure(() => (built++, new TokenBucket(Rule.perMinute(10))));
    expect(await waiting).toMatchObject({ allowed: true, limit: 10, remaining: 8 });
    expect(built).toBe(1); // only the key that was asked for; the rest move over as they are used or swept
    expect(limiter.size).toBe(1000);
    expect(scheduler.pending).toBe(0);
  });

  it('leaves a custom algorithm without peek under its old rule until it goes idle', () => {
    const clock = new ManualClock();
    const custom = (limit: number): RateLimitAlgorithm => {
      const inner = new TokenBucket(Rule.perSecond(limit));
      return { tryAcquire: (now, permits) => inner.tryAcquire(now, permits), isIdle: (now) => inner.isIdle(now) };
    };
    const limiter = new KeyedRateLimiter({ algorithm: () => custom(1), clock });
    limiter.tryAcquire('k');
    limiter.reconfigure(() => custom(5));
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, limit: 1 });
    clock.advance(1000);
    limiter.evictIdle();
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, limit: 5 });
  });

  it('carries debt over: a charge past the limit still counts under the same rule, and under a raised one', () => {
    const debtor = (make: () => RateLimitAlgorithm, to: () => RateLimitAlgorithm) => {
      const clock = new ManualClock(1_764_000_000_000);
      const limiter = new KeyedRateLimiter({ algorithm: make, clock });
      const twin = new KeyedRateLimiter({ algorithm: make, clock });
      limiter.charge('u', 20);
      twin.charge('u', 20);
      limiter.reconfigure(to);
      return { limiter, twin };
    };
    for (const make of [() => new TokenBucket(Rule.perSecond(10)), () => new SlidingWindowCounter(Rule.perSecond(10))]) {
      const { limiter, twin } = debtor(make, make);
      // The twin that never reconfigured: 1100 ms for the token bucket, 1550 for the sliding counter.
      expect(limiter.peek('u')).toEqual(twin.peek('u'));
      expect(limiter.peek('u').retryAfterMs).toBe(make() instanceof TokenBucket ? 1100 : 1550);
    }
    for (const make of [() => new FixedWindow(Rule.perMinute(10)), () => new SlidingWindowLog(Rule.perMinute(10)), () => new TokenBucket(Rule.perMinute(10))]) {
      const { limiter } = debtor(make, () => new TokenBucket(Rule.perMinute(100)));
      expect(limiter.peek('u', 0)).toMatchObject({ limit: 100, remaining: 80 });
    }
  });

  test.prop([
    fc.record({ from: fc.constantFrom(...cases), to: fc.constantFrom(...cases), ruleA: ruleArb(1), ruleB: ruleArb(1) }),
    fc.array(fc.record({ charge: fc.boolean(), permits: fc.integer({ min: 1, max: 12 }) }), { maxLength: 6 }),
    fc.integer({ min: 0, max: 5000 }),
    fc.array(fc.record({ dt: fc.integer({ min: 0, max: 3000 }), permits: fc.integer({ min: 1, max: 8 }) }), { maxLength: 25, size: 'max' }),
  ])(
    'switching A to B and back at one reading leaves the key as the twin that never reconfigured, whenever its usage fits B',
    (pair, spends, start, after) => {
      const clock = new ManualClock(1_764_000_000_000 + start);
      const make = () => pair.from.make(pair.ruleA);
      const limiter = new KeyedRateLimiter({ algorithm: make, clock });
      const twin = new KeyedRateLimiter({ algorithm: make, clock });
      let used = 0; // at one reading nothing is repaid: what was granted or charged, up to A's debt bound
      for (const { charge, permits } of spends) {
        if (charge) {
          expect(limiter.charge('k', permits)).toEqual(twin.charge('k', permits));
          used = Math.min(used + permits, 2 * pair.ruleA.limit);
        } else if (permits <= pair.ruleA.limit && limiter.tryAcquire('k', permits).allowed) {
          twin.tryAcquire('k', permits);
          used += permits;
        }
      }
      fc.pre(used <= 2 * pair.ruleB.limit);
      limiter.reconfigure(() => pair.to.make(pair.ruleB));
      expect(limiter.peek('k', 0).remaining).toBe(Math.max(0, pair.ruleB.limit - used)); // carried over, debt included
      limiter.reconfigure(make);
      for (const { dt, permits } of after) {
        clock.advance(dt);
        const asked = Math.min(permits, pair.ruleA.limit);
        expect(limiter.peek('k', 0)).toEqual(twin.peek('k', 0));
        expect(limiter.tryAcquire('k', asked)).toEqual(twin.tryAcquire('k', asked));
      }
    },
  );

  it('refuses a factory that is not a function and keeps the old one', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: new ManualClock() });
    expect(() => limiter.reconfigure(42 as never)).toThrow(typeError('ratekeeper: `algorithm` must be a function returning a fresh algorithm, got 42'));
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, limit: 1 });
  });
});
