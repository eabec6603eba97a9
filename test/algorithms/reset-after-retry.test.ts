// The contract: every decision's resetAfterMs is at least its retryAfterMs (a key back to new admits
// any request). Checked for every algorithm and for composites of mixed algorithms and rules, on
// clocks that read fractions of a millisecond and step backwards, for rules across the domain; and
// for what limiters answer of them (a full table, a block, a full queue, an outage).
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { Composite, KeyedRateLimiter, ManualScheduler, Rule, SlidingWindowLog, type AccountingAlgorithm, type Decision, type Reservation } from '../../src/index';
import { outagePolicy, peekOutagePolicy } from '../../src/store/outage-policy';
import { algorithms, composites } from '../support/algorithms';

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

// The same law for the decisions a limiter makes of its algorithms' answers: a full table's refusal,
// a block's, a full queue's, and the outage policy's answers, a fallback limiter's included.
describe('every decision a limiter answers, degraded ones included', () => {
  const kinds = [...algorithms, ...composites];
  const keyArb = fc.integer({ min: 0, max: 4 }).map((k) => `k${k}`);
  const limiterOpArb = fc.oneof(
    fc.record({ kind: fc.constantFrom('acquire', 'peek', 'charge', 'reserve', 'wait'), key: keyArb, permits: fc.integer({ min: 0, max: 7 }), dt: fc.integer({ min: -20, max: 400 }) }),
    fc.record({ kind: fc.constant('block'), key: keyArb, permits: fc.integer({ min: 0, max: 900 }), dt: fc.constant(0) }),
    fc.record({ kind: fc.constant('settle'), key: keyArb, permits: fc.integer({ min: 0, max: 7 }), dt: fc.constant(0) }),
  );

  test.prop([fc.integer({ min: 0, max: kinds.length - 1 }), fc.integer({ min: 1, max: 3 }), fc.array(limiterOpArb, { maxLength: 80, size: 'max' })], { numRuns: 300 })(
    'KeyedRateLimiter with maxKeys, blocks and maxWaiters: resetAfterMs is never less than retryAfterMs',
    async (kind, maxKeys, ops) => {
      const scheduler = new ManualScheduler(1_764_000_000_000);
      const limit = 4;
      const limiter = new KeyedRateLimiter({ algorithm: () => (kinds[kind] as (typeof kinds)[number]).make(new Rule(limit, 300)), clock: scheduler, maxKeys, maxWaiters: 1 });
      const reservations: Reservation[] = [];
      const waits: Promise<Decision>[] = [];
      for (const { kind, key, permits, dt } of ops) {
        if (dt > 0) scheduler.advance(dt);
        const request = Math.min(limit, Math.max(1, permits));
        let decision: Decision | undefined;
        if (kind === 'acquire') decision = limiter.tryAcquire(key, request);
        else if (kind === 'peek') decision = limiter.peek(key, Math.min(limit, permits));
        else if (kind === 'charge') decision = limiter.charge(key, request);
        else if (kind === 'reserve') reservations.push(limiter.reserve(key, request));
        else if (kind === 'settle') decision = reservations.shift()?.settle(permits);
        else if (kind === 'block') limiter.block(key, permits);
        else waits.push(limiter.acquire(key, request, { maxWaitMs: 500 }));
        if (decision !== undefined) expectOrdered(decision, `${kind}(${key}, ${permits})`);
      }
      for (const reservation of reservations) expectOrdered(reservation.decision, 'reserve');
      scheduler.advance(10_000);
      for (const decision of await Promise.all(waits)) expectOrdered(decision, 'acquire');
    },
  );

  const rule = new Rule(5, 1000);
  const answerArb = fc.record({
    allowed: fc.boolean(),
    limit: fc.constant(5),
    remaining: fc.integer({ min: 0, max: 5 }),
    retryAfterMs: fc.integer({ min: 0, max: 5000 }),
    resetAfterMs: fc.integer({ min: 0, max: 5000 }),
  }).map((d) => (d.allowed ? { ...d, retryAfterMs: 0 } : { ...d, retryAfterMs: Math.max(1, d.retryAfterMs) }) as Decision);

  test.prop([fc.constantFrom('allow', 'deny', 'sync', 'async', 'throws'), answerArb, fc.integer({ min: 0, max: 5 }), fc.boolean()])(
    "the outage policy's answers ('allow', 'deny', a fallback limiter's, a failed fallback's, and peek's): resetAfterMs is never less than retryAfterMs",
    async (kind, answer, permits, peeking) => {
      const fallback = {
        tryAcquire: () => (kind === 'throws' ? (() => { throw new Error('down too'); })() : kind === 'async' ? Promise.resolve(answer) : answer),
        peek: () => answer,
      };
      const policy = kind === 'allow' || kind === 'deny' ? kind : fallback;
      const context = { timeoutMs: 100, report: () => {}, timeoutError: (ms: number) => new Error(`${ms}`) };
      const decide = peeking ? peekOutagePolicy(policy, context) : outagePolicy(policy, context);
      expectOrdered(await decide(new Error('store down'), 'k', peeking ? permits : Math.max(1, permits), rule), `${kind} ${JSON.stringify(answer)}`);
    },
  );
});
