import fc from 'fast-check';
import { floorDiv } from '../../src/core/exact';
import {
  Composite,
  FixedWindow,
  LeakyBucket,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  type Decision,
  type PeekableAlgorithm,
} from '../../src/index';

/** How an algorithm bounds what it lets through, which decides the rate law it is tested against. */
export type Bound = 'rate' | 'sliding' | 'aligned';

export interface AlgorithmCase {
  readonly name: string;
  readonly make: (rule: Rule) => PeekableAlgorithm;
  readonly bound: Bound;
}

export const algorithms: readonly AlgorithmCase[] = [
  { name: 'TokenBucket', make: (rule) => new TokenBucket(rule), bound: 'rate' },
  { name: 'LeakyBucket', make: (rule) => new LeakyBucket(rule), bound: 'rate' },
  { name: 'FixedWindow', make: (rule) => new FixedWindow(rule), bound: 'aligned' },
  { name: 'SlidingWindowLog', make: (rule) => new SlidingWindowLog(rule), bound: 'sliding' },
  { name: 'SlidingWindowCounter', make: (rule) => new SlidingWindowCounter(rule), bound: 'aligned' },
];

/**
 * Composites whose parts share one rule, so that every law of the conformance suite applies to them
 * unchanged (the limit reported is the rule's). Composites of different rules have their own tests.
 */
export const composites: readonly AlgorithmCase[] = [
  { name: 'Composite(TokenBucket, SlidingWindowLog)', make: (rule) => new Composite([new TokenBucket(rule), new SlidingWindowLog(rule)]), bound: 'sliding' },
  { name: 'Composite(SlidingWindowCounter, FixedWindow)', make: (rule) => new Composite([new SlidingWindowCounter(rule), new FixedWindow(rule)]), bound: 'aligned' },
];

export interface Step {
  readonly dt: number;
  readonly permits: number;
}

export interface Scenario {
  readonly rule: Rule;
  /** The first clock reading: zero, negative, or an epoch-sized time as systemClock gives. */
  readonly start: number;
  readonly steps: readonly Step[];
}

export interface Grant {
  readonly at: number;
  readonly permits: number;
}

const ruleArb = fc
  .record({
    limit: fc.oneof(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 40 }), fc.constantFrom(997, 1000)),
    windowMs: fc.oneof(fc.constantFrom(1000, 60_000, 3, 7), fc.integer({ min: 1, max: 5000 })),
  })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

/** Random traffic for a random rule: bursts (dt 0), steady streams and long pauses, any permit size. */
export const scenarioArb: fc.Arbitrary<Scenario> = ruleArb.chain((rule) =>
  fc.record({
    rule: fc.constant(rule),
    start: fc.oneof(fc.constant(0), fc.integer({ min: -1_000_000, max: 1_000_000 }), fc.constant(1_764_000_000_123)),
    steps: fc.array(
      fc.record({
        dt: fc.oneof(
          fc.constant(0),
          fc.integer({ min: 0, max: Math.ceil(rule.windowMs / rule.limit) }),
          fc.integer({ min: 0, max: 2 * rule.windowMs }),
        ),
        permits: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: rule.limit })),
      }),
      { maxLength: 60, size: 'max' }, // fast-check would keep arrays to ~10 elements otherwise
    ),
  }),
);

/** Plays a scenario through a fresh state, returning it with the time of the last step and every grant. */
export function replay<S extends PeekableAlgorithm>(make: (rule: Rule) => S, scenario: Scenario) {
  const state = make(scenario.rule);
  const grants: Grant[] = [];
  const decisions: Decision[] = [];
  let now = scenario.start;
  let lastGrantAt = -Infinity;
  for (const { dt, permits } of scenario.steps) {
    now += dt;
    const decision = state.tryAcquire(now, permits);
    decisions.push(decision);
    if (decision.allowed) {
      grants.push({ at: now, permits });
      lastGrantAt = now;
    }
  }
  return { state, now, grants, decisions, lastGrantAt };
}

/** The law an algorithm's grants obey, in plain words, to name the property that checks it. */
export function boundName(bound: Bound): string {
  if (bound === 'rate') return 'never more than limit + rate·Δt over any interval';
  if (bound === 'sliding') return 'never more than limit in any window (t - windowMs, t]';
  return 'never more than limit in any aligned window';
}

/** How far grants (in time order) go beyond the bound at their worst, scaled to integers (≤ 0 holds). */
export function worstExcess(bound: Bound, rule: Rule, grants: readonly Grant[]): number {
  const { limit, windowMs } = rule;
  let worst = -Infinity;
  grants.forEach((first, i) => {
    let sum = 0;
    for (let j = i; j < grants.length; j++) {
      const grant = grants[j] as Grant;
      if (bound === 'sliding' && grant.at - first.at >= windowMs) break;
      if (bound === 'aligned' && floorDiv(grant.at, windowMs) !== floorDiv(first.at, windowMs)) break;
      sum += grant.permits;
      const allowance = bound === 'rate' ? limit * windowMs + (grant.at - first.at) * limit : limit * windowMs;
      worst = Math.max(worst, sum * windowMs - allowance);
    }
  });
  return worst;
}

/** Wraps a state so that every grant it makes is written to `grants`: what a test observes of a limiter. */
export function recording<S extends PeekableAlgorithm>(state: S, grants: Grant[]): PeekableAlgorithm {
  return {
    tryAcquire(nowMs, permits = 1) {
      const decision = state.tryAcquire(nowMs, permits);
      if (decision.allowed) grants.push({ at: nowMs, permits });
      return decision;
    },
    peek: (nowMs, permits) => state.peek(nowMs, permits),
    isIdle: (nowMs) => state.isIdle(nowMs),
  };
}
