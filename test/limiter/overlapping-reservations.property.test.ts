// API.md, reserve / settle: reservations that overlap refund exactly, settled in any order. Once all
// are settled the key is as the twin that reserved, at the same moments, only what each kept; and
// whatever else happens on the key (a reset, a reconfiguration, a charge that hits the debt bound),
// a refund never leaves it better off than that twin. Both are keyed limiters on ManualClocks; the
// twin is driven only by what the real one granted, so it holds at least as much at every moment.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { KeyedRateLimiter, LeakyBucket, ManualClock, Rule, TokenBucket, type Reservation } from '../../src/index';

const MAX = Number.MAX_SAFE_INTEGER;

type Kept = 'cancel' | 'below' | 'at' | 'above';
type Op =
  | { readonly kind: 'reserve'; readonly share: number; readonly kept: Kept; readonly keptShare: number }
  | { readonly kind: 'acquire' | 'charge'; readonly share: number }
  | { readonly kind: 'settle'; readonly which: number }
  | { readonly kind: 'wait'; readonly dt: number }
  | { readonly kind: 'reset' | 'reconfigure' };

const shareArb = fc.oneof(fc.constantFrom(0, 1), fc.double({ min: 0, max: 1, noNaN: true }));

/** Ops whose waits are `dtArb`; settlements outnumber nothing else, so reservations overlap. */
const opsArb = (dtArb: fc.Arbitrary<number>) =>
  fc.array(
    fc.oneof(
      { weight: 4, arbitrary: fc.record({ kind: fc.constant('reserve' as const), share: shareArb, kept: fc.constantFrom<Kept>('cancel', 'below', 'at', 'above'), keptShare: shareArb }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constantFrom('acquire' as const, 'charge' as const), share: shareArb }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('settle' as const), which: fc.nat() }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('wait' as const), dt: dtArb }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('reset' as const, 'reconfigure' as const) }) },
    ),
    { maxLength: 50 },
  );

/** Rules whose bucket spans fewer than 2^53 scaled units, with waits in whole ms and in eighths of a ms (exact in doubles). */
const narrowArb = fc
  .record({ limit: fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 100_000 })), windowMs: fc.oneof(fc.constantFrom(1, 3, 1000, 60_000), fc.integer({ min: 1, max: 100_000 })) })
  .chain(({ limit, windowMs }) =>
    fc.record({
      rule: fc.constant(new Rule(limit, windowMs)),
      ops: opsArb(fc.oneof(fc.integer({ min: 0, max: 2 * windowMs }), fc.integer({ min: 0, max: 16 * windowMs }).map((eighths) => eighths / 8))),
    }),
  );

/** Rules past 2^52 scaled units (`Plan.wide`): whole tokens and units toward the next, on an integer clock. */
const wideArb = fc
  .record({ limit: fc.oneof(fc.constantFrom(1e15, 2 ** 52 + 1, MAX), fc.integer({ min: 2 ** 40, max: MAX })), windowMs: fc.oneof(fc.constantFrom(86_400_000, 2 ** 42 - 1, 7), fc.integer({ min: 2, max: 2 ** 42 })) })
  .filter(({ limit, windowMs }) => 2n * BigInt(limit) * (BigInt(windowMs) / BigInt(gcd(limit, windowMs))) > BigInt(MAX))
  .chain(({ limit, windowMs }) =>
    fc.record({
      rule: fc.constant(new Rule(limit, windowMs)),
      ops: opsArb(fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.double({ min: 0, max: 1.5, noNaN: true }).map((share) => Math.trunc(share * windowMs)))),
    }),
  );

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

const permitsOf = (share: number, limit: number) => Math.max(1, Math.min(limit, Math.floor(share * limit)));

/** What a reservation of `permits` really cost. */
function keptOf(kept: Kept, share: number, permits: number, limit: number): number {
  if (kept === 'cancel') return 0;
  if (kept === 'below') return Math.min(permits - 1, Math.floor(share * permits));
  if (kept === 'at') return permits;
  return Math.min(MAX, permits + permitsOf(share, limit));
}

describe.each([
  { name: 'TokenBucket', make: (rule: Rule) => new TokenBucket(rule) },
  { name: 'LeakyBucket', make: (rule: Rule) => new LeakyBucket(rule) },
])('$name', ({ make }) => {
  const run = (rule: Rule, ops: readonly Op[], order: readonly number[]) => {
    const { limit, windowMs } = rule;
    const clocks = [new ManualClock(1_764_000_000_000), new ManualClock(1_764_000_000_000)] as const;
    const [real, twin] = clocks.map((clock) => new KeyedRateLimiter({ algorithm: () => make(rule), clock }));
    if (real === undefined || twin === undefined) throw new Error('two limiters');
    const outstanding: { reservation: Reservation; permits: number; kept: number }[] = [];
    // False from the first change after which the twin may be better off: a charge that may have hit
    // the debt bound (it leaves the key a full two windows from new), or a reconfiguration (each state
    // carries its usage in whole permits, rounded up).
    let exact = true;
    const mayHitBound = (resetAfterMs: number) => {
      if (resetAfterMs >= 2 * windowMs) exact = false;
    };
    const settle = (which: number) => {
      const [settled] = outstanding.splice(which % outstanding.length, 1);
      if (settled === undefined) return;
      const { reservation, permits, kept } = settled;
      if (kept === 0) reservation.cancel();
      else mayHitBound(reservation.settle(kept).resetAfterMs);
      if (kept > permits) twin.charge('k', kept - permits);
    };
    const compare = () => {
      const [r, t] = [real.peek('k', 0), twin.peek('k', 0)];
      expect(r.remaining).toBeLessThanOrEqual(t.remaining);
      expect(r.resetAfterMs).toBeGreaterThanOrEqual(t.resetAfterMs);
      if (exact && outstanding.length === 0) {
        expect(r).toEqual(t);
        expect(real.peek('k', limit)).toEqual(twin.peek('k', limit));
      }
    };
    for (const op of ops) {
      if (op.kind === 'reserve') {
        const permits = permitsOf(op.share, limit);
        const reservation = real.reserve('k', permits);
        if (reservation.decision.allowed) {
          const kept = keptOf(op.kept, op.keptShare, permits, limit);
          if (Math.min(kept, permits) > 0) expect(twin.tryAcquire('k', Math.min(kept, permits)).allowed).toBe(true);
          outstanding.push({ reservation, permits, kept });
        }
      } else if (op.kind === 'acquire') {
        const permits = permitsOf(op.share, limit);
        if (real.tryAcquire('k', permits).allowed) expect(twin.tryAcquire('k', permits).allowed).toBe(true);
      } else if (op.kind === 'charge') {
        const permits = Math.min(MAX, Math.max(1, Math.floor(op.share * 2 * limit)));
        mayHitBound(real.charge('k', permits).resetAfterMs);
        twin.charge('k', permits);
      } else if (op.kind === 'settle') {
        if (outstanding.length > 0) settle(op.which);
      } else if (op.kind === 'wait') {
        for (const clock of clocks) clock.advance(op.dt);
      } else if (op.kind === 'reset') {
        real.reset('k');
        twin.reset('k');
      } else {
        real.reconfigure(() => make(rule));
        twin.reconfigure(() => make(rule));
        exact = false;
      }
      compare();
    }
    for (const which of order) {
      if (outstanding.length === 0) break;
      settle(which);
      compare();
    }
    while (outstanding.length > 0) settle(0);
    compare();
  };

  test.prop([narrowArb, fc.array(fc.nat(), { maxLength: 50 })], { numRuns: 300 })(
    'once all are settled, in any order, the key is as the twin that reserved only what each kept (narrow rules, fractional waits)',
    ({ rule, ops }, order) => run(rule, ops, order),
  );

  test.prop([wideArb, fc.array(fc.nat(), { maxLength: 50 })], { numRuns: 300 })(
    'once all are settled, in any order, the key is as the twin that reserved only what each kept (wide rules)',
    ({ rule, ops }, order) => run(rule, ops, order),
  );
});
