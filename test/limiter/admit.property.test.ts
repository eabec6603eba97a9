// API.md, "Admission across keys": admit never grants a part unless all are granted, and decides as
// the parts decided one by one with refunds would: reserve each in order; at the first refusal,
// answer the rest by peek and cancel the granted ones. Every algorithm, in memory: two copies of the
// same limiters on one ManualClock, one driven by admit, the other by hand.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { admit, KeyedRateLimiter, ManualClock, Rule, type Admission, type Decision, type Reservation } from '../../src/index';
import { algorithms } from '../support/algorithms';
import { oneByOne } from '../support/one-by-one';

const KEYS = ['a', 'b'] as const;

type Op =
  | { readonly kind: 'admit'; readonly parts: readonly { readonly limiter: number; readonly key: number; readonly share: number }[] }
  | { readonly kind: 'settle'; readonly which: number; readonly shares: readonly number[] }
  | { readonly kind: 'cancel'; readonly which: number }
  | { readonly kind: 'wait'; readonly dt: number };

const share = fc.double({ min: 0, max: 1, noNaN: true });
const opArb = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('admit' as const), parts: fc.array(fc.record({ limiter: fc.nat(2), key: fc.nat(1), share }), { minLength: 1, maxLength: 4 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('settle' as const), which: fc.nat(), shares: fc.array(fc.double({ min: 0, max: 2, noNaN: true }), { minLength: 4, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), which: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), dt: fc.integer({ min: 0, max: 40 }) }) },
);
const setupArb = fc.record({
  limiters: fc.array(fc.record({ algorithm: fc.nat(algorithms.length - 1), limit: fc.integer({ min: 1, max: 6 }), windowMs: fc.constantFrom(1, 7, 30, 100) }), { minLength: 3, maxLength: 3 }),
  ops: fc.array(opArb, { maxLength: 40 }),
});

/** The binding part of a granted admission (fewest left, first on a tie) or the refusing part that waits longest (first on a tie). */
function expectedDecision(parts: readonly Decision[]): Decision {
  if (parts.every((part) => part.allowed)) return parts.reduce((a, b) => (b.remaining < a.remaining ? b : a));
  return parts.filter((part) => !part.allowed).reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
}

describe('admit, in memory', () => {
  test.prop([setupArb])('never grants a part unless all are, and decides as the parts one by one with refunds', ({ limiters, ops }) => {
    const clock = new ManualClock(1_000);
    const make = () => limiters.map(({ algorithm, limit, windowMs }) => new KeyedRateLimiter({ algorithm: () => algorithms[algorithm]!.make(new Rule(limit, windowMs)), clock }));
    const [real, byHand] = [make(), make()];
    const outstanding: { admission: Admission; held: Reservation[] }[] = [];
    const states = (set: readonly KeyedRateLimiter[]) => set.flatMap((limiter) => KEYS.map((key) => limiter.peek(key, 0)));

    for (const op of ops) {
      if (op.kind === 'admit') {
        const permitsOf = (part: (typeof op.parts)[number]) => Math.max(1, Math.ceil(part.share * limiters[part.limiter]!.limit));
        const before = states(real);
        const admission = admit(op.parts.map((part) => ({ limiter: real[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));

        const { decisions, held, refused } = oneByOne(op.parts.map((part) => ({ limiter: byHand[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));

        expect(admission.parts).toEqual(decisions);
        expect(admission.decision).toEqual(expectedDecision(decisions));
        expect(admission.decision.allowed).toBe(!refused);
        if (refused) {
          // Nothing anywhere was spent: every key stands as before.
          expect(states(real)).toEqual(before);
          expect(admission.settle(op.parts.map(() => 1))).toEqual(decisions);
        } else {
          outstanding.push({ admission, held });
        }
      } else if (op.kind === 'settle' || op.kind === 'cancel') {
        const [settling] = outstanding.splice(op.which % Math.max(1, outstanding.length), 1);
        if (settling === undefined) continue;
        const { admission, held } = settling;
        if (op.kind === 'cancel') {
          admission.cancel();
          for (const reservation of held) reservation.cancel();
        } else {
          const actual = admission.parts.map((part, i) => Math.floor(op.shares[i]! * (part.limit - part.remaining)));
          const after = admission.settle(actual);
          expect(after).toEqual(held.map((reservation, i) => reservation.settle(actual[i]!)));
        }
        expect(() => admission.cancel()).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' }));
      } else {
        clock.advance(op.dt);
      }
      expect(states(real)).toEqual(states(byHand));
    }
  });
});
