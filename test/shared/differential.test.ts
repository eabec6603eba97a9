// src/shared/shared-keyed-rate-limiter.ts and the words it keeps per algorithm (token-bucket-word.ts,
// fixed-window-word.ts, sliding-window-counter-word.ts over packed-windows.ts, sliding-window-log-ring.ts):
// in one thread, every decision equals the in-memory algorithm's.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { SharedKeyedRateLimiter, type SharedAlgorithm } from '../../src/shared';
import { algorithms, scenarioArb } from '../support/algorithms';

// With one thread, the shared limiter decides exactly as its in-memory twin given the same clock
// readings: every field of every decision, for every algorithm, with several keys, backward clock
// steps, and keys given away as idle when the table is small.

const NAMES: Record<string, SharedAlgorithm> = {
  TokenBucket: 'token-bucket',
  LeakyBucket: 'leaky-bucket',
  FixedWindow: 'fixed-window',
  SlidingWindowLog: 'sliding-window-log',
  SlidingWindowCounter: 'sliding-window-counter',
};

const traceArb = scenarioArb.chain((scenario) =>
  fc.record({
    scenario: fc.constant(scenario),
    keys: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: scenario.steps.length, maxLength: scenario.steps.length }),
    back: fc.array(fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 3 * scenario.rule.windowMs })), {
      minLength: scenario.steps.length,
      maxLength: scenario.steps.length,
    }),
  }),
);

describe.each(algorithms)('shared $name', ({ name, make }) => {
  const algorithm = NAMES[name] as SharedAlgorithm;

  test.prop([traceArb], { numRuns: 150 })(
    'one thread: every decision equals the in-memory twin’s (several keys, earlier readings)',
    ({ scenario, keys, back }) => {
      const clock = new ManualClock(scenario.start);
      const twin = new KeyedRateLimiter({ algorithm: () => make(scenario.rule), clock });
      const shared = new SharedKeyedRateLimiter({ algorithm, rule: scenario.rule, maxKeys: 64, clock });
      let now = scenario.start;
      scenario.steps.forEach(({ dt, permits }, i) => {
        now += dt;
        clock.set(now - (back[i] as number)); // sometimes a reading earlier than the last
        const key = `user-${keys[i]}`;
        expect(shared.tryAcquire(key, permits), `step ${i}, ${key} at ${clock.now()}`).toEqual(twin.tryAcquire(key, permits));
      });
      expect(shared.size).toBe(new Set(keys).size);
    },
  );

  test.prop([traceArb, fc.array(fc.boolean(), { minLength: 1 })], { numRuns: 100 })(
    'two limiters on one buffer, taking turns: each reads the other’s writes (what each remembers of its own last write never goes stale)',
    ({ scenario, keys }, turns) => {
      const clock = new ManualClock(scenario.start);
      const twin = new KeyedRateLimiter({ algorithm: () => make(scenario.rule), clock });
      const first = new SharedKeyedRateLimiter({ algorithm, rule: scenario.rule, maxKeys: 64, clock });
      const second = SharedKeyedRateLimiter.attach(first.buffer, { clock });
      let now = scenario.start;
      scenario.steps.forEach(({ dt, permits }, i) => {
        now += dt;
        clock.set(now);
        const limiter = turns[i % turns.length] ? second : first;
        const key = `user-${(keys[i] as number) % 2}`;
        expect(limiter.tryAcquire(key, permits), `step ${i}, ${key} at ${now}`).toEqual(twin.tryAcquire(key, permits));
      });
    },
  );

  test.prop([scenarioArb], { numRuns: 100 })(
    'one thread, keys given away as idle: decisions still equal never-forgetting twins',
    (scenario) => {
      const clock = new ManualClock(scenario.start);
      // 4 keys in 16 slots whose windows overlap: new keys take the slots of idle ones.
      const shared = new SharedKeyedRateLimiter({ algorithm, rule: scenario.rule, maxKeys: 2, clock });
      const twins = new Map<string, ReturnType<typeof make>>();
      let now = scenario.start;
      scenario.steps.forEach(({ dt, permits }, i) => {
        now += dt;
        clock.set(now);
        const key = `k${i % 4}`;
        if (!twins.has(key)) twins.set(key, make(scenario.rule));
        const got = shared.tryAcquire(key, permits);
        if (got.degraded === 'key-table-full') {
          expect(got.allowed).toBe(false);
          return;
        }
        expect(got, `step ${i}, ${key} at ${now}`).toEqual(twins.get(key)?.tryAcquire(now, permits));
      });
      expect(shared.size).toBeLessThanOrEqual(2);
    },
  );

  test.prop([traceArb], { numRuns: 100 })(
    'peek(k, n) deep-equals tryAcquire(k, n) in every state, a full table included (two handles, six keys, two slots)',
    ({ scenario, keys }) => {
      const clock = new ManualClock(scenario.start);
      const first = new SharedKeyedRateLimiter({ algorithm, rule: scenario.rule, maxKeys: 2, clock });
      const handles = [first, SharedKeyedRateLimiter.attach(first.buffer, { clock })];
      let now = scenario.start;
      scenario.steps.forEach(({ dt, permits }, i) => {
        now += dt;
        clock.set(now);
        const handle = handles[i % 2] as SharedKeyedRateLimiter;
        const key = `user-${keys[i]}`;
        const peeked = handle.peek(key, permits);
        expect(handle.tryAcquire(key, permits), `step ${i}, ${key} at ${now}`).toEqual(peeked);
      });
    },
  );

  test.prop([scenarioArb, fc.integer({ min: 1, max: 1_000_000 })], { numRuns: 100 })(
    'peek answers exactly as tryAcquire would, and spends nothing',
    (scenario, size) => {
      const clock = new ManualClock(scenario.start);
      const shared = new SharedKeyedRateLimiter({ algorithm, rule: scenario.rule, maxKeys: 4, clock });
      const twin = make(scenario.rule);
      let now = scenario.start;
      for (const { dt, permits } of scenario.steps) {
        now += dt;
        clock.set(now);
        const peeked = shared.peek('k', permits);
        expect(peeked).toEqual(twin.peek(now, permits));
        expect(shared.tryAcquire('k', permits)).toEqual(twin.tryAcquire(now, permits));
      }
      const permits = 1 + (size % scenario.rule.limit);
      expect(shared.peek('never-seen', permits)).toEqual(make(scenario.rule).peek(now, permits));
      expect(shared.size).toBe(scenario.steps.length === 0 ? 0 : 1);
    },
  );
});
