import fc from 'fast-check';
import {
  FixedWindow,
  LeakyBucket,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  type Decision,
  type RateLimitAlgorithm,
} from '../../src/index';

/** How an algorithm bounds what it lets through, which decides the rate law it is tested against. */
export type Bound = 'rate' | 'sliding' | 'aligned';

export interface AlgorithmCase {
  readonly name: string;
  readonly make: (rule: Rule) => RateLimitAlgorithm;
  readonly bound: Bound;
}

export const algorithms: readonly AlgorithmCase[] = [
  { name: 'TokenBucket', make: (rule) => new TokenBucket(rule), bound: 'rate' },
  { name: 'LeakyBucket', make: (rule) => new LeakyBucket(rule), bound: 'rate' },
  { name: 'FixedWindow', make: (rule) => new FixedWindow(rule), bound: 'aligned' },
  { name: 'SlidingWindowLog', make: (rule) => new SlidingWindowLog(rule), bound: 'sliding' },
  { name: 'SlidingWindowCounter', make: (rule) => new SlidingWindowCounter(rule), bound: 'aligned' },
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
      { maxLength: 60 },
    ),
  }),
);

/** Plays a scenario through a fresh state, returning it with the time of the last step and every grant. */
export function replay(make: (rule: Rule) => RateLimitAlgorithm, scenario: Scenario) {
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
