import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { rangeError, typeError } from '../../src/core/errors';
import { FixedWindow, LeakyBucket, Rule, SlidingWindowCounter, SlidingWindowLog, TokenBucket, type Decision, type PeekableAlgorithm } from '../../src/index';

// The Rule domain (limit a safe integer >= 1, windowMs a whole number of ms from 1 to 2^42) and the
// promise that comes with it: every rule in it is exact in every algorithm, however large
// limit × windowMs is. The formulas are checked against BigInt models of the API contract's text.

const MAX = Number.MAX_SAFE_INTEGER;

describe('Rule domain', () => {
  it('exports its bound: 2^42 ms, about 139 years', () => {
    expect(Rule.MAX_WINDOW_MS).toBe(2 ** 42);
    expect(new Rule(1, Rule.MAX_WINDOW_MS).windowMs).toBe(2 ** 42);
    expect(new Rule(MAX, 1).limit).toBe(MAX);
  });

  it.each([0.5, 1000.5, 100.1, 1e-4, 2 ** 42 + 1, 1e308, 0, -1000, Number.NaN, Infinity])('refuses the window %s with a RangeError naming it', (windowMs) => {
    expect(() => new Rule(2, windowMs)).toThrow(rangeError(`ratekeeper: \`windowMs\` must be an integer from 1 to 4398046511104, got ${windowMs}`));
  });

  it('refuses a window that is no number with a TypeError', () => {
    expect(() => new Rule(2, '1000' as unknown as number)).toThrow(typeError('ratekeeper: `windowMs` must be a number, got "1000"'));
    expect(() => new Rule(2, 1000n as unknown as number)).toThrow(TypeError);
  });
});

/** Limits and windows from the whole domain: small, realistic, and at both ends. */
const limitArb = fc.oneof(
  fc.integer({ min: 1, max: 10 }),
  fc.constantFrom(1_000_000_000, 100_000_000, 999_999_999_989, 1_000_000_007, MAX, MAX - 1, 2 ** 52),
  fc.integer({ min: 1, max: MAX }),
  fc.integer({ min: MAX - 1000, max: MAX }),
);
const windowArb = fc.oneof(
  fc.integer({ min: 1, max: 10 }),
  fc.constantFrom(1000, 3_600_000, 86_400_000, 604_800_000, 2 ** 42, 2 ** 42 - 1),
  fc.integer({ min: 1, max: 2 ** 42 }),
  fc.integer({ min: 2 ** 42 - 1000, max: 2 ** 42 }),
);
const domainRuleArb = fc.record({ limit: limitArb, windowMs: windowArb }).map(({ limit, windowMs }) => new Rule(limit, windowMs));

interface Step {
  readonly dt: number;
  /** A fraction of the limit, so that huge limits get huge requests. */
  readonly share: number;
}

const domainScenarioArb = fc.record({
  rule: domainRuleArb,
  start: fc.constantFrom(0, 1_764_000_000_123, -5_000),
  steps: fc.array(
    fc.record({
      dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 1000 }), fc.double({ min: 0, max: 2.2, noNaN: true })),
      share: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 1, noNaN: true })),
    }),
    { maxLength: 25 },
  ),
});

/** dt as a fraction of the window (above 10, in ms), so that every part of a huge window is reached. */
function stepTime(dt: number, windowMs: number): number {
  return Number.isInteger(dt) ? dt : Math.floor(dt * windowMs);
}

/** Permits for a share of the limit; the log stores one entry per permit, so it gets small requests. */
function permitsFor(share: number, limit: number, small = false): number {
  const top = small ? Math.min(limit, 64) : limit;
  return Math.max(1, Math.min(top, Math.floor(share * top)));
}

const cases: { name: string; make: (rule: Rule) => PeekableAlgorithm; small?: boolean }[] = [
  { name: 'TokenBucket', make: (rule) => new TokenBucket(rule) },
  { name: 'LeakyBucket', make: (rule) => new LeakyBucket(rule) },
  { name: 'FixedWindow', make: (rule) => new FixedWindow(rule) },
  { name: 'SlidingWindowLog', make: (rule) => new SlidingWindowLog(rule), small: true },
  { name: 'SlidingWindowCounter', make: (rule) => new SlidingWindowCounter(rule) },
];

type DomainScenario = typeof domainScenarioArb extends fc.Arbitrary<infer T> ? T : never;

function play(make: (rule: Rule) => PeekableAlgorithm, scenario: DomainScenario, small = false) {
  const state = make(scenario.rule);
  let now = scenario.start;
  for (const { dt, share } of scenario.steps) {
    now += stepTime(dt, scenario.rule.windowMs);
    expectWhole(state.tryAcquire(now, permitsFor(share, scenario.rule.limit, small)));
  }
  return { state, now };
}

/** No Infinity, no fraction, nothing past 2^53: every field a whole number a caller can use. */
function expectWhole(decision: Decision): void {
  for (const field of [decision.remaining, decision.retryAfterMs, decision.resetAfterMs]) {
    expect(Number.isSafeInteger(field) && field >= 0, `${JSON.stringify(decision)}`).toBe(true);
  }
}

describe.each(cases)('$name over the whole Rule domain', ({ make, small }) => {
  test.prop([domainScenarioArb, fc.double({ min: 0, max: 1, noNaN: true })])(
    'retryAfterMs is exact: one ms earlier is refused, at it allowed',
    (scenario, share) => {
      const { state, now } = play(make, scenario, small);
      const permits = permitsFor(share, scenario.rule.limit, small);
      const decision = state.tryAcquire(now, permits);
      expectWhole(decision);
      if (decision.allowed) return;
      expect(decision.retryAfterMs).toBeGreaterThanOrEqual(1);
      expect(state.peek(now + decision.retryAfterMs - 1, permits).allowed).toBe(false);
      expect(state.tryAcquire(now + decision.retryAfterMs, permits).allowed).toBe(true);
    },
  );

  test.prop([domainScenarioArb, fc.double({ min: 0, max: 1, noNaN: true })])(
    'remaining is truthful: exactly that many more permits fit right now',
    (scenario, share) => {
      const { state, now } = play(make, scenario, small);
      const { remaining } = state.tryAcquire(now, permitsFor(share, scenario.rule.limit, small));
      const top = small ? Math.min(scenario.rule.limit, 64) : scenario.rule.limit;
      if (remaining + 1 <= top) expect(state.peek(now, remaining + 1).allowed).toBe(false);
      if (remaining >= 1 && remaining <= top) expect(state.peek(now, remaining).allowed).toBe(true);
    },
  );
});

// The contract's formulas in BigInt, unreduced, for the two algorithms whose arithmetic passes 2^53.

interface Model {
  decide(now: bigint, permits: bigint): { allowed: boolean; remaining: bigint; retryAfterMs: bigint; resetAfterMs: bigint };
}

const ceil = (n: bigint, d: bigint) => (n <= 0n ? -(-n / d) : (n + d - 1n) / d);
const floor = (n: bigint, d: bigint) => (n >= 0n ? n / d : -((-n + d - 1n) / d));

/** A token bucket in units of 1/windowMs token: holds limit·windowMs, refills `limit` a ms. */
function tokenBucketModel(limit: bigint, w: bigint): Model {
  let level = limit * w;
  let last: bigint | undefined;
  return {
    decide(now, permits) {
      if (last !== undefined && now < last) now = last;
      const filled = last === undefined ? level : level + (now - last) * limit;
      const units = filled < limit * w ? filled : limit * w;
      const cost = permits * w;
      if (units < cost) return { allowed: false, remaining: units / w, retryAfterMs: ceil(cost - units, limit), resetAfterMs: ceil(limit * w - units, limit) };
      level = units - cost;
      last = now;
      return { allowed: true, remaining: level / w, retryAfterMs: 0n, resetAfterMs: ceil(limit * w - level, limit) };
    },
  };
}

/** The sliding window counter of the contract: previous·(w - elapsed)/w + current + permits <= limit. */
function counterModel(limit: bigint, w: bigint): Model {
  let window = 0n;
  let offset = 0n;
  let previous = 0n;
  let current = 0n;
  return {
    decide(now, permits) {
      const index = floor(now, w);
      const fresh = previous === 0n && current === 0n;
      const moved = fresh || index > window;
      const win = moved ? index : window;
      const start = win * w;
      let elapsed = now - start;
      // A reading earlier than the latest grant counts as no time passing.
      if (!moved && elapsed < offset) elapsed = offset;
      const prev = win === window ? previous : win === window + 1n ? current : 0n;
      const cur = win === window ? current : 0n;
      const room = (limit - cur) * w - prev * (w - elapsed);
      const reset = (c: bigint) => (c > 0n ? 2n * w - elapsed : prev > 0n ? w - elapsed : 0n);
      if (room < permits * w) {
        // The first whole ms t > 0 at which the request fits, found from the formula itself.
        const fitsAt = (t: bigint) => {
          const e = elapsed + t;
          if (e < w) return (limit - cur) * w - prev * (w - e) >= permits * w;
          if (e < 2n * w) return (limit - 0n) * w - cur * (2n * w - e) >= permits * w;
          return true;
        };
        let low = 1n;
        let high = 2n * w;
        while (low < high) {
          const mid = (low + high) / 2n;
          if (fitsAt(mid)) high = mid;
          else low = mid + 1n;
        }
        const remaining = floor(room, w);
        return { allowed: false, remaining: remaining > 0n ? remaining : 0n, retryAfterMs: low, resetAfterMs: reset(cur) };
      }
      window = win;
      offset = elapsed;
      previous = prev;
      current = cur + permits;
      return { allowed: true, remaining: floor(room - permits * w, w), retryAfterMs: 0n, resetAfterMs: reset(current) };
    },
  };
}

describe.each([
  { name: 'TokenBucket', make: (rule: Rule) => new TokenBucket(rule), model: tokenBucketModel },
  { name: 'SlidingWindowCounter', make: (rule: Rule) => new SlidingWindowCounter(rule), model: counterModel },
])('$name decides as the contract formula says, for every rule', ({ make, model }) => {
  test.prop([domainScenarioArb.map((s) => ({ ...s, start: Math.max(0, s.start) }))])('every decision equals the BigInt formula', (scenario) => {
    const { limit, windowMs } = scenario.rule;
    const state = make(scenario.rule);
    const reference = model(BigInt(limit), BigInt(windowMs));
    let now = scenario.start;
    for (const { dt, share } of scenario.steps) {
      now += stepTime(dt, windowMs);
      const permits = permitsFor(share, limit, false);
      const expected = reference.decide(BigInt(now), BigInt(permits));
      const { allowed, remaining, retryAfterMs, resetAfterMs } = state.tryAcquire(now, permits);
      expect({ allowed, remaining: BigInt(remaining), retryAfterMs: BigInt(retryAfterMs), resetAfterMs: BigInt(resetAfterMs) }).toEqual(expected);
    }
  });
});

describe('rules from the issue', () => {
  it('Rule(999_999_999_989, 3_600_000) grants its last permit', () => {
    const bucket = new TokenBucket(new Rule(999_999_999_989, 3_600_000));
    expect(bucket.tryAcquire(0, 999_999_999_988)).toMatchObject({ allowed: true, remaining: 1 });
    expect(bucket.tryAcquire(0, 1)).toMatchObject({ allowed: true, remaining: 0 });
    expect(bucket.tryAcquire(0, 1)).toMatchObject({ allowed: false, retryAfterMs: 1 });
  });

  it.each([
    ['1e9 per day', 1_000_000_000, 86_400_000],
    ['1e8 per week', 100_000_000, 604_800_000],
  ])('SlidingWindowCounter holds %s to its formula', (_name, limit, windowMs) => {
    const counter = new SlidingWindowCounter(new Rule(limit, windowMs));
    const model = counterModel(BigInt(limit), BigInt(windowMs));
    const t0 = 1_764_000_000_000 - (1_764_000_000_000 % windowMs);
    for (const [at, permits] of [[t0, limit], [t0 + windowMs + 1, 1], [t0 + windowMs + 7, 13], [t0 + windowMs + windowMs / 2, limit / 2]] as const) {
      const expected = model.decide(BigInt(at), BigInt(permits));
      const decision = counter.tryAcquire(at, permits);
      expect(decision.allowed).toBe(expected.allowed);
      expect(BigInt(decision.remaining)).toBe(expected.remaining);
      expect(BigInt(decision.retryAfterMs)).toBe(expected.retryAfterMs);
    }
  });

  it('SlidingWindowCounter used directly treats an earlier reading as no time passing', () => {
    const counter = new SlidingWindowCounter(new Rule(3, 1000));
    counter.tryAcquire(500, 3);
    expect(counter.tryAcquire(1900, 1).allowed).toBe(true); // the previous 3 weigh 0.3, rounded up to 1
    expect(counter.peek(1100)).toEqual(counter.peek(1900));
    expect(counter.peek(1100).allowed).toBe(true);
  });
});
