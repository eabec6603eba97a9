// The contract: every decision's resetAfterMs is at least its retryAfterMs (a key back to new admits
// any request). Checked for every algorithm and for composites of mixed algorithms and rules, on
// clocks that read fractions of a millisecond and step backwards, for rules across the domain.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { Composite, Rule, SlidingWindowLog, type AccountingAlgorithm, type Decision } from '../../src/index';
import { algorithms } from '../support/algorithms';

const MAX = Number.MAX_SAFE_INTEGER;

const ruleArb = fc.oneof(
  { weight: 3, arbitrary: fc.record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 1, max: 5000 }) }) },
  fc.record({ limit: fc.constantFrom(1, 7, 1_000_000_007, 2 ** 52 + 1, MAX), windowMs: fc.constantFrom(1, 3, 1000, 86_400_000, 2 ** 42) }),
);

/** Readings: fractional, tiny, whole, whole windows give or take a hair, and backwards. */
const dtArb = fc.oneof(
  fc.double({ min: 0, max: 1e-6, noNaN: true }),
  fc.double({ min: -50, max: 3000, noNaN: true }),
  fc.integer({ min: -5, max: 5000 }),
  fc.constantFrom(999.9999999999998, 1000.0000000000001, 0.1, 0.7),
);
const opArb = fc.record({
  dt: dtArb,
  kind: fc.constantFrom('acquire', 'acquire', 'peek', 'charge', 'reserve'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
});

const partArb = fc.record({ kind: fc.integer({ min: 0, max: algorithms.length - 1 }), rule: ruleArb.map(({ limit, windowMs }) => new Rule(limit, windowMs)) });

const expectOrdered = (decision: Decision, context: string) => {
  expect(decision.resetAfterMs, `${context}: ${JSON.stringify(decision)}`).toBeGreaterThanOrEqual(decision.retryAfterMs);
};

/** Plays ops on a state; every decision (and a peek of each size after each step) keeps resetAfterMs >= retryAfterMs. */
function play(state: AccountingAlgorithm, limit: number, small: boolean, start: number, ops: readonly { dt: number; kind: string; share: number }[]) {
  let now = start;
  const top = small ? Math.min(limit, 64) : limit;
  for (const { dt, kind, share } of ops) {
    now += dt;
    const permits = Math.max(1, Math.floor(share * top));
    let decision: Decision;
    if (kind === 'peek') decision = state.peek(now, permits);
    else if (kind === 'charge') decision = state.charge(now, permits);
    else if (kind === 'reserve') decision = state.reserve(now, permits).decision;
    else decision = state.tryAcquire(now, permits);
    expectOrdered(decision, `${kind}(${now}, ${permits})`);
    for (const p of [1, Math.max(1, Math.floor(top / 2)), top]) expectOrdered(state.peek(now, p), `peek(${now}, ${p})`);
  }
}

const startArb = fc.oneof(fc.constant(0), fc.double({ min: -1e6, max: 1e6, noNaN: true }), fc.double({ min: 1.7e12, max: 1.9e12, noNaN: true }));

describe.each(algorithms)('$name on fractional and backward clocks', ({ name, make }) => {
  test.prop([ruleArb, startArb, fc.array(opArb, { maxLength: 30, size: 'max' })])('resetAfterMs is never less than retryAfterMs', ({ limit, windowMs }, start, ops) => {
    const rule = new Rule(limit, windowMs);
    play(make(rule) as AccountingAlgorithm, limit, name === 'SlidingWindowLog', start, ops);
  });
});

test.prop([fc.array(partArb, { minLength: 1, maxLength: 3 }), startArb, fc.array(opArb, { maxLength: 30, size: 'max' })], { numRuns: 300 })(
  'Composite of mixed algorithms and rules on fractional and backward clocks: resetAfterMs is never less than retryAfterMs',
  (specs, start, ops) => {
    const parts = specs.map(({ kind, rule }) => (algorithms[kind] as (typeof algorithms)[number]).make(rule));
    const limit = Math.min(...specs.map(({ rule }) => rule.limit));
    play(new Composite(parts), limit, true, start, ops);
  },
);

it('Composite: a hit at a reading a hair past 0 is refused until 2 and new at 2, not at 1 (found by the property above)', () => {
  const composite = new Composite([new SlidingWindowLog(new Rule(1, 1))]);
  composite.tryAcquire(5e-324);
  // 5e-324 + 1 rounds to the reading 1, at which the hit (leaving at 1 + 5e-324) is still there.
  expect(composite.peek(5e-324, 1)).toEqual({ allowed: false, limit: 1, remaining: 0, retryAfterMs: 2, resetAfterMs: 2 });
});
