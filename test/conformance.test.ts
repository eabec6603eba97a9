import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { algorithms, boundName, composites, replay, scenarioArb, worstExcess } from './support/algorithms';
import { rangeError, typeError } from '../src/core/errors';

// One suite, every algorithm: each law a user relies on, checked on random traffic.

const followUpArb = fc.array(fc.record({ dt: fc.integer({ min: 0, max: 3000 }), permits: fc.integer({ min: 1, max: 1_000_000 }) }), {
  maxLength: 20,
  size: 'max', // fast-check would keep arrays to ~10 elements otherwise
});

describe.each([...algorithms, ...composites])('$name', ({ make, bound }) => {
  test.prop([scenarioArb, fc.integer({ min: 1, max: 1_000_000 })])(
    'retryAfterMs is exact: one ms earlier is refused, at it allowed',
    (scenario, size) => {
      const { state, now } = replay(make, scenario);
      const permits = 1 + (size % scenario.rule.limit);
      const decision = state.tryAcquire(now, permits);
      if (decision.allowed) {
        expect(decision.retryAfterMs).toBe(0);
        return;
      }
      expect(Number.isInteger(decision.retryAfterMs)).toBe(true);
      expect(decision.retryAfterMs).toBeGreaterThanOrEqual(1);
      expect(state.tryAcquire(now + decision.retryAfterMs - 1, permits).allowed).toBe(false);
      expect(state.tryAcquire(now + decision.retryAfterMs, permits).allowed).toBe(true);
    },
  );

  test.prop([scenarioArb, fc.integer({ min: 1, max: 1_000_000 })])(
    'remaining is truthful: exactly that many more permits fit right now',
    (scenario, size) => {
      const { state, now } = replay(make, scenario);
      const { limit } = scenario.rule;
      const decision = state.tryAcquire(now, 1 + (size % limit));
      const { remaining } = decision;
      expect(Number.isInteger(remaining) && remaining >= 0 && remaining <= limit).toBe(true);
      expect(decision.limit).toBe(limit);
      if (remaining + 1 <= limit) expect(state.tryAcquire(now, remaining + 1).allowed).toBe(false);
      if (remaining >= 1) expect(state.tryAcquire(now, remaining).allowed).toBe(true);
    },
  );

  test.prop([scenarioArb, fc.integer({ min: 1, max: 1_000_000 })])(
    'peek answers exactly as tryAcquire would, and spends nothing',
    (scenario, size) => {
      const { state, now } = replay(make, scenario);
      const permits = 1 + (size % scenario.rule.limit);
      const before = structuredClone(state);
      const peeked = state.peek(now, permits);
      expect(state).toEqual(before);
      expect(state.tryAcquire(now, permits)).toEqual(peeked);
    },
  );

  test.prop([scenarioArb])('a refused request changes nothing', (scenario) => {
    const state = make(scenario.rule);
    let now = scenario.start;
    for (const { dt, permits } of scenario.steps) {
      now += dt;
      const before = structuredClone(state);
      if (!state.tryAcquire(now, permits).allowed) expect(state).toEqual(before);
    }
  });

  test.prop([scenarioArb, fc.integer({ min: 1, max: 1_000_000 })])(
    'after resetAfterMs of quiet the key is idle and a whole-limit request passes; one ms before it does not',
    (scenario, size) => {
      const { state, now } = replay(make, scenario);
      const { limit } = scenario.rule;
      const { resetAfterMs } = state.tryAcquire(now, 1 + (size % limit));
      expect(Number.isInteger(resetAfterMs) && resetAfterMs >= 0).toBe(true);
      if (resetAfterMs > 0) {
        expect(state.isIdle(now + resetAfterMs - 1)).toBe(false);
        expect(state.tryAcquire(now + resetAfterMs - 1, limit).allowed).toBe(false);
      }
      expect(state.isIdle(now + resetAfterMs)).toBe(true);
      expect(state.tryAcquire(now + resetAfterMs, limit)).toMatchObject({ allowed: true, remaining: 0 });
    },
  );

  test.prop([scenarioArb, fc.integer({ min: 0, max: 10_000 }), followUpArb])(
    'isIdle never lies: an idle state decides exactly as a fresh one',
    (scenario, pause, followUp) => {
      const { state, now } = replay(make, scenario);
      if (!state.isIdle(now + pause)) return;
      const fresh = make(scenario.rule);
      let t = now + pause;
      for (const { dt, permits } of followUp) {
        t += dt;
        const p = 1 + (permits % scenario.rule.limit);
        expect(state.tryAcquire(t, p)).toEqual(fresh.tryAcquire(t, p));
      }
    },
  );

  test.prop([scenarioArb])(boundName(bound), (scenario) => {
    const { grants } = replay(make, scenario);
    expect(worstExcess(bound, scenario.rule, grants)).toBeLessThanOrEqual(0);
  });

  test.prop([scenarioArb, fc.integer({ min: 1, max: 10_000_000 }), fc.integer({ min: 1, max: 1_000_000 }), followUpArb])(
    'time running backwards is no time passing: no throw, nothing extra granted, stored time kept',
    (scenario, back, size, followUp) => {
      const { lastGrantAt } = replay(make, scenario);
      if (lastGrantAt === -Infinity) return;
      const permits = 1 + (size % scenario.rule.limit);
      const backwards = replay(make, scenario).state;
      const onTime = replay(make, scenario).state;
      const early = backwards.tryAcquire(lastGrantAt - back, permits);
      const late = onTime.tryAcquire(lastGrantAt, permits);
      if (early.allowed) expect(late.allowed).toBe(true);
      if (early.allowed !== late.allowed) return;
      expect(early.remaining).toBeLessThanOrEqual(late.remaining);
      let t = lastGrantAt;
      for (const { dt, permits: p } of followUp) {
        t += dt;
        const q = 1 + (p % scenario.rule.limit);
        expect(backwards.tryAcquire(t, q)).toEqual(onTime.tryAcquire(t, q));
      }
    },
  );

  test.prop([scenarioArb, fc.constantFrom(0, -1, 1.5, Number.NaN, Infinity, -Infinity, 2 ** 53)])(
    'bad permits throw a RangeError naming the value and change nothing',
    (scenario, permits) => {
      const { state, now } = replay(make, scenario);
      const before = structuredClone(state);
      expect(() => state.tryAcquire(now, permits)).toThrow(
        rangeError(`ratekeeper: \`permits\` must be an integer from 1 to ${scenario.rule.limit}, got ${permits}`),
      );
      expect(() => state.tryAcquire(now, scenario.rule.limit + 1)).toThrow(RangeError);
      expect(() => state.tryAcquire(now, '1' as unknown as number)).toThrow(
        typeError('ratekeeper: `permits` must be a number, got "1"'),
      );
      expect(() => state.tryAcquire(Number.NaN)).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got NaN'));
      expect(() => state.tryAcquire(Infinity)).toThrow(RangeError);
      expect(state).toEqual(before);
    },
  );
});
