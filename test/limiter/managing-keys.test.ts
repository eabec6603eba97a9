import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, type Decision, type PeekableAlgorithm, type Reservation } from '../../src/index';
import { algorithms, composites } from '../support/algorithms';

// The laws of API.md "Managing keys and settling costs", for every algorithm and for composites,
// each checked against a twin: the same limiter driven the same way without the operation.

interface Op {
  readonly dt: number;
  readonly kind: 'acquire' | 'charge';
  readonly permits: number;
}

interface Case {
  readonly rule: Rule;
  readonly start: number;
  readonly history: readonly Op[];
}

const ruleArb = fc
  .record({
    limit: fc.oneof(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 40 }), fc.constant(1000)),
    windowMs: fc.oneof(fc.constantFrom(1000, 60_000, 7), fc.integer({ min: 1, max: 5000 })),
  })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

const opArb = (rule: Rule, charges: boolean): fc.Arbitrary<Op> =>
  fc.record({
    dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: Math.ceil(rule.windowMs / rule.limit) }), fc.integer({ min: 0, max: 2 * rule.windowMs })),
    kind: charges ? fc.constantFrom('acquire' as const, 'acquire' as const, 'charge' as const) : fc.constant('acquire' as const),
    permits: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: rule.limit }), fc.integer({ min: 1, max: 3 * rule.limit })),
  });

const caseArb: fc.Arbitrary<Case> = ruleArb.chain((rule) =>
  fc.record({
    rule: fc.constant(rule),
    start: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 1_000_000 }), fc.constant(1_764_000_000_123)),
    history: fc.array(opArb(rule, true), { maxLength: 30, size: 'max' }),
  }),
);

/** Probes after the operation: requests (and pauses) both limiters see alike. */
const probesArb = fc.array(fc.record({ dt: fc.integer({ min: 0, max: 3000 }), size: fc.integer({ min: 1, max: 1_000_000 }) }), {
  maxLength: 12,
  size: 'max',
});

const sizeOf = (rule: Rule, size: number) => 1 + (size % rule.limit);

describe.each([...algorithms, ...composites])('$name', ({ make }) => {
  /** A limiter on one key 'k' driven through the history; the clock stands at the last step. */
  const build = ({ rule, start, history }: Case) => {
    const clock = new ManualClock(start);
    const limiter = new KeyedRateLimiter({ algorithm: () => make(rule) as PeekableAlgorithm, clock });
    for (const { dt, kind, permits } of history) {
      clock.advance(dt);
      if (kind === 'charge') limiter.charge('k', permits);
      else limiter.tryAcquire('k', Math.min(permits, rule.limit));
    }
    return { limiter, clock };
  };

  /** Plays the probes on each limiter (each with its clock), expecting the same decisions. */
  const expectTwins = (rule: Rule, probes: readonly { dt: number; size: number }[], ...pairs: { limiter: KeyedRateLimiter; clock: ManualClock }[]) => {
    for (const { dt, size } of probes) {
      const decisions = pairs.map(({ limiter, clock }) => {
        clock.advance(dt);
        return limiter.tryAcquire('k', sizeOf(rule, size));
      });
      for (const decision of decisions.slice(1)) expect(decision).toEqual(decisions[0]);
    }
  };

  /** Expects `retryAfterMs` of a refusal for `permits` to be exact, on fresh copies built by `copy`. */
  const expectExactRetry = (copy: () => { limiter: KeyedRateLimiter; clock: ManualClock }, permits: number, decision: Decision) => {
    if (decision.allowed) return;
    const early = copy();
    early.clock.advance(decision.retryAfterMs - 1);
    expect(early.limiter.tryAcquire('k', permits).allowed).toBe(false);
    const onTime = copy();
    onTime.clock.advance(decision.retryAfterMs);
    expect(onTime.limiter.tryAcquire('k', permits).allowed).toBe(true);
  };

  /** Expects the key to be as new exactly `resetAfterMs` on (a whole-limit request passes), and not a ms before. */
  const expectExactReset = (copy: () => { limiter: KeyedRateLimiter; clock: ManualClock }, limit: number, resetAfterMs: number) => {
    const late = copy();
    late.clock.advance(resetAfterMs);
    expect(late.limiter.tryAcquire('k', limit)).toMatchObject({ allowed: true, remaining: 0 });
    if (resetAfterMs === 0) return;
    const early = copy();
    early.clock.advance(resetAfterMs - 1);
    expect(early.limiter.tryAcquire('k', limit).allowed).toBe(false);
  };

  test.prop([caseArb, fc.integer({ min: 1, max: 1_000_000 }), probesArb])(
    'peek answers what tryAcquire would, spends nothing, and stores no key',
    (c, size, probes) => {
      const permits = sizeOf(c.rule, size);
      const peeked = build(c);
      const twin = build(c);
      expect(peeked.limiter.peek('k', permits)).toEqual(build(c).limiter.tryAcquire('k', permits));
      const before = peeked.limiter.size;
      peeked.limiter.peek('unknown', permits);
      expect(peeked.limiter.size).toBe(before);
      expectTwins(c.rule, probes, peeked, twin);
    },
  );

  test.prop([caseArb])('peek(k, 0) is the state now: whole permits available, time until as new, allowed', (c) => {
    const { limit } = c.rule;
    const now = build(c).limiter.peek('k', 0);
    expect(now).toMatchObject({ allowed: true, limit: expect.any(Number), retryAfterMs: 0 });
    expect(Number.isInteger(now.remaining) && now.remaining >= 0).toBe(true);
    if (now.limit !== limit) return; // a composite names its binding part
    if (now.remaining >= 1) expect(build(c).limiter.tryAcquire('k', now.remaining).allowed).toBe(true);
    if (now.remaining < limit) expect(build(c).limiter.tryAcquire('k', now.remaining + 1).allowed).toBe(false);
    expectExactReset(() => build(c), limit, now.resetAfterMs);
  });

  test.prop([caseArb, probesArb])('after reset every decision is a never-seen key\'s', (c, probes) => {
    const reset = build(c);
    reset.limiter.reset('k');
    const fresh = build({ ...c, history: [] });
    fresh.clock.set(reset.clock.now());
    expectTwins(c.rule, probes, reset, fresh);
  });

  test.prop([caseArb, fc.integer({ min: 1, max: 3_000_000 }), fc.integer({ min: 1, max: 1_000_000 })])(
    'charge: what fits is the grant tryAcquire would make; beyond it debt, with exact retryAfterMs and resetAfterMs, bounded to two windows',
    (c, amount, size) => {
      const { limit, windowMs } = c.rule;
      const permits = 1 + (amount % (3 * limit));
      const charged = build(c);
      const decision = charged.limiter.charge('k', permits);
      expect(decision.allowed).toBe(true);
      expect(Number.isInteger(decision.remaining) && decision.remaining >= 0).toBe(true);
      if (permits <= limit) {
        const granted = build(c).limiter.tryAcquire('k', permits);
        if (granted.allowed) expect(decision).toEqual(granted);
      }
      const afterCharge = () => {
        const copy = build(c);
        copy.limiter.charge('k', permits);
        return copy;
      };
      const probe = sizeOf(c.rule, size);
      expectExactRetry(afterCharge, probe, charged.limiter.tryAcquire('k', probe));
      // resetAfterMs counts the debt: a whole-limit request passes at it, not a ms before.
      expect(decision.resetAfterMs).toBeLessThanOrEqual(2 * windowMs);
      if (decision.limit !== limit) return; // a composite names its binding part
      expectExactReset(afterCharge, limit, decision.resetAfterMs);
    },
  );

  test.prop([caseArb, fc.integer({ min: 1, max: 1_000_000 }), fc.integer({ min: 0, max: 3000 }), probesArb])(
    'a reservation decides as tryAcquire; cancelled with nothing else on the key, every later decision is the twin\'s that never reserved, whatever the delay',
    (c, size, delay, probes) => {
      const permits = sizeOf(c.rule, size);
      const reserving = build(c);
      const twin = build(c);
      const reservation = reserving.limiter.reserve('k', permits);
      expect(reservation.decision).toEqual(build(c).limiter.tryAcquire('k', permits));
      reserving.clock.advance(delay);
      twin.clock.advance(delay);
      reservation.cancel();
      expectTwins(c.rule, probes, reserving, twin);
    },
  );

  test.prop([caseArb, fc.integer({ min: 1, max: 1_000_000 }), fc.integer({ min: 0, max: 3_000_000 }), probesArb])(
    'settle(n) changes nothing; settle(m > n) is charge(m - n)',
    (c, size, actual, probes) => {
      const permits = sizeOf(c.rule, size);
      const settling = build(c);
      const twin = build(c);
      const reservation = settling.limiter.reserve('k', permits);
      const granted = twin.limiter.tryAcquire('k', permits);
      const used = permits + (actual % (3 * c.rule.limit));
      const settled = reservation.settle(used);
      if (!granted.allowed) {
        expect(settled).toEqual(reservation.decision);
      } else if (used > permits) {
        expect(settled).toEqual(twin.limiter.charge('k', used - permits));
      } else {
        expect(settled).toEqual(twin.limiter.peek('k', 0));
      }
      expectTwins(c.rule, probes, settling, twin);
    },
  );

  test.prop([
    caseArb,
    fc.integer({ min: 1, max: 1_000_000 }),
    fc.integer({ min: 0, max: 1_000_000 }),
    ruleArb.chain((rule) => fc.array(opArb(rule, false), { maxLength: 10 })),
    fc.integer({ min: 0, max: 1_000_000 }),
    fc.array(fc.integer({ min: 0, max: 3000 }), { maxLength: 6 }),
  ])(
    'a late refund never leaves the key better off than a twin given the same grants',
    (c, size, refundSize, between, chargeSize, pauses) => {
      const { limit } = c.rule;
      const permits = sizeOf(c.rule, size);
      const real = build(c);
      const twin = build(c);
      const reservation = real.limiter.reserve('k', permits);
      if (!reservation.decision.allowed) return;
      // Other activity: the twin is given exactly what the real key granted, and one charge of at
      // most the limit (so that neither reaches the debt bound, where forgiving differs).
      for (const { dt, permits: p } of between) {
        real.clock.advance(dt);
        twin.clock.advance(dt);
        const q = Math.min(p, limit);
        if (real.limiter.tryAcquire('k', q).allowed) twin.limiter.charge('k', q);
      }
      const extra = 1 + (chargeSize % limit);
      real.limiter.charge('k', extra);
      twin.limiter.charge('k', extra);
      reservation.settle(refundSize % permits);
      for (const pause of pauses) {
        real.clock.advance(pause);
        twin.clock.advance(pause);
        for (let p = 1; p <= Math.min(limit, 8); p++) expectNoBetter(real.limiter.peek('k', p), twin.limiter.peek('k', p));
      }
    },
  );

  test.prop([
    caseArb,
    fc.integer({ min: 0, max: 6 }),
    fc.array(
      fc.record({
        dt: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 3000 })),
        kind: fc.constantFrom('reserve' as const, 'reserve' as const, 'settle' as const, 'settle' as const, 'acquire' as const),
        size: fc.integer({ min: 1, max: 1_000_000 }),
        pick: fc.nat(),
      }),
      { minLength: 2, maxLength: 14 },
    ),
    fc.integer({ min: 1, max: 1_000_000 }),
    fc.nat(),
    fc.array(fc.integer({ min: 0, max: 3000 }), { maxLength: 6 }),
  ], { numRuns: 1000 })(
    'with other reservations granted and refunded around it, a refund never leaves the key better off than a twin that never made that reservation',
    (c, targetAt, steps, size, refundSize, pauses) => {
      const { limit } = c.rule;
      const real = build(c);
      const twin = build(c);
      let target: Reservation | undefined;
      // The other reservations, each with its twin's: the twin is given exactly the grants the real key got, and the same refunds.
      const open: { real: Reservation; twin: Reservation; permits: number }[] = [];
      steps.forEach(({ dt, kind, size: stepSize, pick }, i) => {
        real.clock.advance(dt);
        twin.clock.advance(dt);
        if (i === targetAt) {
          target = real.limiter.reserve('k', sizeOf(c.rule, size));
          if (!target.decision.allowed) target = undefined;
        }
        const permits = sizeOf(c.rule, stepSize);
        if (kind === 'acquire') {
          if (real.limiter.tryAcquire('k', permits).allowed) expect(twin.limiter.tryAcquire('k', permits).allowed).toBe(true);
        } else if (kind === 'reserve') {
          const granted = real.limiter.reserve('k', permits);
          if (granted.decision.allowed) open.push({ real: granted, twin: twin.limiter.reserve('k', permits), permits });
        } else if (open.length > 0) {
          const [settled] = open.splice(pick % open.length, 1);
          settled!.real.settle(pick % settled!.permits);
          settled!.twin.settle(pick % settled!.permits);
        }
      });
      if (target === undefined) return;
      target.settle(refundSize % sizeOf(c.rule, size));
      for (const pause of [0, ...pauses]) {
        real.clock.advance(pause);
        twin.clock.advance(pause);
        for (let p = 1; p <= Math.min(limit, 8); p++) expectNoBetter(real.limiter.peek('k', p), twin.limiter.peek('k', p));
      }
    },
  );

  test('the refund of a reservation another refund overtook gives back no more than is still counted (issue 13)', () => {
    const clock = new ManualClock(0);
    const limiter = new KeyedRateLimiter({ algorithm: () => make(new Rule(10, 10)) as PeekableAlgorithm, clock });
    const twin = new KeyedRateLimiter({ algorithm: () => make(new Rule(10, 10)) as PeekableAlgorithm, clock });
    const b = limiter.reserve('k', 5);
    const a = limiter.reserve('k', 5);
    twin.reserve('k', 5).cancel();
    b.cancel();
    clock.advance(3);
    if (limiter.tryAcquire('k', 8).allowed) expect(twin.tryAcquire('k', 8).allowed).toBe(true);
    a.cancel();
    for (let p = 1; p <= 10; p++) expectNoBetter(limiter.peek('k', p), twin.peek('k', p));
  });

  test.prop([caseArb, fc.integer({ min: 1, max: 1_000_000 })])('a reservation settles once; a refused one changes nothing', (c, size) => {
    const permits = sizeOf(c.rule, size);
    const { limiter } = build(c);
    const reservation = limiter.reserve('k', permits);
    const before = limiter.peek('k', 0);
    if (!reservation.decision.allowed) {
      expect(reservation.settle(permits)).toEqual(reservation.decision);
      reservation.cancel();
      expect(limiter.peek('k', 0)).toEqual(before);
      return;
    }
    reservation.cancel();
    const after = limiter.peek('k', 0);
    expect(() => reservation.settle(0)).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' }));
    expect(() => reservation.cancel()).toThrow('already settled');
    expect(limiter.peek('k', 0)).toEqual(after);
  });

  test.prop([caseArb, fc.integer({ min: 1, max: 5000 }), fc.array(fc.record({ dt: fc.integer({ min: 0, max: 800 }), size: fc.integer({ min: 1, max: 1_000_000 }) }), { maxLength: 10 }), probesArb])(
    'block: refused until its end with retryAfterMs = max(time left, the algorithm\'s own), spending nothing; from its end, the twin\'s decisions',
    (c, durationMs, during, probes) => {
      const blocked = build(c);
      const twin = build(c);
      const end = blocked.clock.now() + durationMs;
      blocked.limiter.block('k', durationMs);
      blocked.limiter.block('k', Math.floor(durationMs / 2)); // a shorter block shortens nothing
      for (const { dt, size } of during) {
        if (blocked.clock.now() + dt >= end) break;
        blocked.clock.advance(dt);
        twin.clock.advance(dt);
        const permits = sizeOf(c.rule, size);
        const alone = twin.limiter.peek('k', permits);
        const decision = blocked.limiter.tryAcquire('k', permits);
        expect(decision).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: Math.max(end - blocked.clock.now(), alone.retryAfterMs) });
        expect(blocked.limiter.peek('k', 0).allowed).toBe(false);
        expect(blocked.limiter.evictIdle()).toBe(0);
      }
      twin.clock.set(end);
      blocked.clock.set(end);
      expectTwins(c.rule, probes, blocked, twin);
    },
  );

  test.prop([
    caseArb,
    fc.boolean(),
    fc.integer({ min: 1, max: 1_000_000 }),
    fc.array(fc.record({ dt: fc.integer({ min: 0, max: 800 }), permits: fc.integer({ min: 1, max: 1_000_000 }) }), { maxLength: 6 }),
    probesArb,
  ])(
    'more spending never leaves a key better off: a charge, or a reservation cancelled after charges, never makes a later request pass that the twin refuses',
    (c, reserving, size, charges, probes) => {
      const more = build(c);
      const twin = build(c);
      const extra = sizeOf(c.rule, size);
      const reservation = reserving ? more.limiter.reserve('k', extra) : (more.limiter.charge('k', extra), undefined);
      for (const { dt, permits } of charges) {
        for (const { limiter, clock } of [more, twin]) {
          clock.advance(dt);
          limiter.charge('k', 1 + (permits % (3 * c.rule.limit)));
        }
      }
      reservation?.cancel(); // gives back only what is still counted: never below the twin
      for (const { dt, size: asked } of probes) {
        more.clock.advance(dt);
        twin.clock.advance(dt);
        const permits = sizeOf(c.rule, asked);
        if (more.limiter.peek('k', permits).allowed) expect(twin.limiter.peek('k', permits).allowed).toBe(true);
        const [left, leftTwin] = [more.limiter.peek('k', 0), twin.limiter.peek('k', 0)];
        if (left.limit === leftTwin.limit) expect(left.remaining).toBeLessThanOrEqual(leftTwin.remaining);
      }
    },
  );
});

/** A decision is no better than another: not allowed where it is refused, no more left, no sooner retry. */
function expectNoBetter(real: Decision, twin: Decision): void {
  if (twin.allowed) {
    if (real.allowed) expect(real.remaining).toBeLessThanOrEqual(twin.remaining);
    return;
  }
  expect(real.allowed).toBe(false);
  expect(real.retryAfterMs).toBeGreaterThanOrEqual(twin.retryAfterMs);
}
