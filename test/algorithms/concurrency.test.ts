import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { Composite, Concurrency, FixedWindow, Rule, SlidingWindowLog, TokenBucket, type Decision, type Receipt } from '../../src/index';
import { rangeError, typeError } from '../../src/core/errors';

const NEVER = 2 ** 42;

/** A lease as the model keeps it: permits held until `end`, unless released. */
interface ModelLease {
  permits: number;
  end: number;
  readonly receipt: Receipt;
}

type Op =
  | { readonly kind: 'reserve'; readonly dt: number; readonly permits: number }
  | { readonly kind: 'release' | 'refund'; readonly dt: number; readonly pick: number; readonly permits: number }
  | { readonly kind: 'extend'; readonly dt: number; readonly pick: number; readonly ms: number };

const caseArb = fc
  .record({
    limit: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 50 })),
    leaseMs: fc.oneof(fc.constantFrom(1, 1000, 60_000, Infinity), fc.integer({ min: 1, max: 5000 })),
    start: fc.oneof(fc.constant(0), fc.constant(1_764_000_000_123), fc.integer({ min: -1000, max: 1000 })),
  })
  .chain(({ limit, leaseMs, start }) => {
    const dt = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 3000 }), fc.integer({ min: -500, max: -1 }));
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ kind: fc.constant('reserve' as const), dt, permits: fc.integer({ min: 1, max: limit }) }),
      fc.record({ kind: fc.constantFrom('release' as const, 'refund' as const), dt, pick: fc.nat(), permits: fc.integer({ min: 0, max: limit }) }),
      fc.record({ kind: fc.constant('extend' as const), dt, pick: fc.nat(), ms: fc.oneof(fc.integer({ min: 1, max: 5000 }), fc.constant(Infinity)) }),
    );
    return fc.record({ limit: fc.constant(limit), leaseMs: fc.constant(leaseMs), start: fc.constant(start), ops: fc.array(op, { maxLength: 40, size: 'max' }) });
  });

/** What a Concurrency should answer, from the leases the model holds (API.md "In-flight limits"). */
function expected(limit: number, leaseMs: number, leases: readonly ModelLease[], now: number, permits: number): Decision {
  const live = leases.filter((lease) => lease.end > now).sort((a, b) => a.end - b.end);
  const free = limit - live.reduce((sum, lease) => sum + lease.permits, 0);
  const last = live.length === 0 ? 0 : (live[live.length - 1] as ModelLease).end - now;
  const reset = (longest: number) => Math.min(NEVER, Math.ceil(Math.max(last, longest)));
  if (permits === 0) return { allowed: true, limit, remaining: Math.max(0, free), retryAfterMs: 0, resetAfterMs: reset(0) };
  if (permits <= free) return { allowed: true, limit, remaining: free - permits, retryAfterMs: 0, resetAfterMs: reset(leaseMs) };
  let freed = 0;
  let retryAfterMs = NEVER;
  for (const lease of live) {
    freed += lease.permits;
    if (freed >= permits - free) {
      retryAfterMs = Math.max(1, Math.min(NEVER, Math.ceil(lease.end - now)));
      break;
    }
  }
  return { allowed: false, limit, remaining: Math.max(0, free), retryAfterMs, resetAfterMs: reset(0) };
}

describe('Concurrency', () => {
  test.prop([caseArb])(
    'decides as the leases held say: never more than limit held, released permits back exactly, each lease ends at grant + leaseMs',
    ({ limit, leaseMs, start, ops }) => {
      const state = new Concurrency(limit, { leaseMs });
      const leases: ModelLease[] = [];
      let reading = start;
      // The latest time written at: an earlier reading counts as no time passing.
      let last = -Infinity;
      for (const op of ops) {
        reading += op.dt;
        const now = Math.max(reading, last);
        for (const permits of [0, 1, limit]) expect(state.peek(reading, permits)).toEqual(expected(limit, leaseMs, leases, now, permits));
        const live = leases.filter((lease) => lease.end > now);
        const held = live.reduce((sum, lease) => sum + lease.permits, 0);
        expect(held).toBeLessThanOrEqual(limit);
        if (op.kind === 'reserve') {
          const want = expected(limit, leaseMs, leases, now, op.permits);
          const { decision, receipt } = state.reserve(reading, op.permits);
          expect(decision).toEqual(want);
          expect(receipt === undefined).toBe(!want.allowed);
          if (receipt !== undefined) {
            leases.push({ permits: op.permits, end: now + leaseMs, receipt });
            last = now;
          }
          continue;
        }
        const lease = leases[op.pick % Math.max(1, leases.length)];
        if (lease === undefined) continue;
        if (op.kind === 'release') {
          expect(state.release(reading, lease.receipt)).toBe(lease.end > now);
          leases.splice(leases.indexOf(lease), 1);
          // What it held is free again, exactly: no more, no less.
          expect(state.peek(reading, 0).remaining).toBe(Math.max(0, limit - held + (lease.end > now ? lease.permits : 0)));
        } else if (op.kind === 'refund') {
          state.refund(reading, lease.receipt, op.permits);
          lease.permits -= Math.min(op.permits, lease.permits);
          if (lease.permits === 0) leases.splice(leases.indexOf(lease), 1);
        } else if (op.kind === 'extend') {
          const extended = lease.end > now;
          expect(state.extend(reading, lease.receipt, op.ms)).toBe(extended);
          if (extended) {
            lease.end = now + op.ms;
            last = now;
          }
        }
      }
      const idleAt = Math.max(reading, last, ...leases.map((lease) => lease.end));
      expect(state.isIdle(idleAt)).toBe(true);
      if (leases.some((lease) => lease.end > Math.max(reading, last))) expect(state.isIdle(Math.max(reading, last))).toBe(false);
    },
  );

  it('gives a lease back at exactly grant + leaseMs, and a refusal says when', () => {
    const state = new Concurrency(2, { leaseMs: 1000 });
    state.reserve(100);
    state.reserve(400);
    expect(state.peek(500)).toEqual({ allowed: false, limit: 2, remaining: 0, retryAfterMs: 600, resetAfterMs: 900 });
    expect(state.peek(1099).allowed).toBe(false);
    expect(state.peek(1100)).toEqual({ allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 });
    expect(state.peek(1100, 2)).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 300 });
  });

  it('answers 2^42, "never by time", when only a release can make room', () => {
    const state = new Concurrency(1, { leaseMs: Infinity });
    const { receipt } = state.reserve(0);
    expect(state.peek(10 ** 12)).toEqual({ allowed: false, limit: 1, remaining: 0, retryAfterMs: NEVER, resetAfterMs: NEVER });
    expect(state.isIdle(10 ** 15)).toBe(false);
    state.release(10 ** 12, receipt as Receipt);
    expect(state.peek(10 ** 12)).toEqual({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: NEVER });
  });

  it('cannot be granted by tryAcquire or charged: nobody could release it', () => {
    const state = new Concurrency(2);
    const error = typeError(
      'ratekeeper: tryAcquire cannot be used with a Concurrency limit: its grant would be held with no reservation to release it; use reserve() or lease() and settle',
    );
    expect(() => state.tryAcquire(0)).toThrow(error);
    expect(() => state.charge(0, 1)).toThrow(TypeError);
    expect(() => new Composite([new TokenBucket(Rule.perSecond(5)), new Concurrency(2)]).tryAcquire(0)).toThrow(error);
    expect(() => new Composite([new TokenBucket(Rule.perSecond(5)), new Concurrency(2)]).charge(0, 1)).toThrow(TypeError);
    expect(state.peek(0, 0)).toEqual({ allowed: true, limit: 2, remaining: 2, retryAfterMs: 0, resetAfterMs: 0 });
  });

  it('refuses bad limits and lease lengths with errors naming the value', () => {
    expect(() => new Concurrency(0)).toThrow(rangeError('ratekeeper: `limit` must be a safe integer of at least 1, got 0'));
    expect(() => new Concurrency(1.5)).toThrow(rangeError('ratekeeper: `limit` must be a safe integer of at least 1, got 1.5'));
    expect(() => new Concurrency(2 ** 53)).toThrow(RangeError);
    expect(() => new Concurrency('2' as never)).toThrow(typeError('ratekeeper: `limit` must be a number, got "2"'));
    expect(() => new Concurrency(2, { leaseMs: 0 })).toThrow(rangeError('ratekeeper: `leaseMs` must be an integer from 1 to 4398046511104, got 0'));
    expect(() => new Concurrency(2, { leaseMs: 2 ** 42 + 1 })).toThrow(RangeError);
    expect(() => new Concurrency(2, { leaseMs: 0.5 })).toThrow(RangeError);
    expect(() => new Concurrency(2, { leaseMs: -Infinity })).toThrow(RangeError);
    expect(() => new Concurrency(2, { leaseMs: Number.NaN })).toThrow(RangeError);
    expect(() => new Concurrency(2, { leaseMs: '1000' as never })).toThrow(typeError('ratekeeper: `leaseMs` must be a number, got "1000"'));
    expect(() => new Concurrency(2, null as never)).toThrow(TypeError);
    expect(() => new Concurrency(2).reserve(0, 3)).toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 2, got 3'));
    const { receipt } = new Concurrency(2).reserve(0);
    expect(() => new Concurrency(2).extend(0, receipt as Receipt, 0)).toThrow(rangeError('ratekeeper: `ms` must be an integer from 1 to 4398046511104, got 0'));
    expect(new Concurrency(3, { leaseMs: Infinity }).toJSON()).toEqual({ algorithm: 'concurrency', limit: 3, leaseMs: null });
    expect(new Concurrency(3, { leaseMs: undefined }).leaseMs).toBe(60_000);
  });
});

/** Composites of a rate and an in-flight limit, each rate checked against its own twin. */
const rates = [
  { name: 'TokenBucket', make: (rule: Rule) => new TokenBucket(rule) },
  { name: 'FixedWindow', make: (rule: Rule) => new FixedWindow(rule) },
  { name: 'SlidingWindowLog', make: (rule: Rule) => new SlidingWindowLog(rule) },
];

describe.each(rates)('Composite of $name and Concurrency', ({ make }) => {
  const opsArb = fc.record({
    limit: fc.integer({ min: 1, max: 5 }),
    inFlight: fc.integer({ min: 1, max: 4 }),
    ops: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 400 }), permits: fc.integer({ min: 1, max: 4 }), release: fc.nat() }), { maxLength: 30 }),
  });

  test.prop([opsArb])('is all-or-nothing: a refusal by either part spends nothing in the other', ({ limit, inFlight, ops }) => {
    const rule = new Rule(limit, 1000);
    const rate = make(rule);
    const held = new Concurrency(inFlight, { leaseMs: 700 });
    const both = new Composite([rate, held]);
    // The twins: the same parts driven only by the grants the composite made.
    const rateTwin = make(rule);
    const heldTwin = new Concurrency(inFlight, { leaseMs: 700 });
    const receipts: [Receipt, Receipt][] = [];
    let now = 0;
    for (const { dt, permits: asked, release } of ops) {
      now += dt;
      const permits = Math.min(asked, limit, inFlight);
      const alone = [rateTwin.peek(now, permits), heldTwin.peek(now, permits)];
      const { decision, receipt } = both.reserve(now, permits);
      expect(decision.allowed).toBe(alone.every((d) => d.allowed));
      if (receipt !== undefined) {
        rateTwin.tryAcquire(now, permits);
        receipts.push([receipt, heldTwin.reserve(now, permits).receipt as Receipt]);
      } else {
        // Refused: each part's state is its twin's, so nothing was spent anywhere.
        expect(decision.retryAfterMs).toBeGreaterThanOrEqual(Math.max(...alone.map((d) => d.retryAfterMs)));
      }
      expect(rate.peek(now, 0)).toEqual(rateTwin.peek(now, 0));
      expect(held.peek(now, 0)).toEqual(heldTwin.peek(now, 0));
      const settled = receipts.splice(release % (receipts.length + 1), 1)[0];
      if (settled !== undefined) {
        expect(both.release(now, settled[0])).toBe(heldTwin.release(now, settled[1]));
        expect(held.peek(now, 0)).toEqual(heldTwin.peek(now, 0));
        expect(rate.peek(now, 0)).toEqual(rateTwin.peek(now, 0));
      }
    }
  });
});

describe('Composite with a Concurrency part', () => {
  it('retries when every part allows together: the rate alone, the lease alone, or both', () => {
    const both = new Composite([new TokenBucket(Rule.perSecond(2)), new Concurrency(1, { leaseMs: 300 })]);
    both.reserve(0);
    // The in-flight part binds: its lease ends at 300, by when the bucket has refilled too.
    expect(both.peek(0)).toEqual({ allowed: false, limit: 1, remaining: 0, retryAfterMs: 300, resetAfterMs: 500 });
    const { receipt } = both.reserve(300);
    both.release(300, receipt as Receipt);
    // Released: now only the bucket refuses (empty until 500 + 250 less the refill since).
    expect(both.peek(300)).toMatchObject({ allowed: false, retryAfterMs: 200 });
    expect(both.extend(300, receipt as Receipt, 10)).toBe(false);
  });

  it('answers 2^42 at most when only a release can make room', () => {
    const both = new Composite([new TokenBucket(Rule.perSecond(2)), new Concurrency(1, { leaseMs: Infinity })]);
    both.reserve(0);
    expect(both.peek(5)).toEqual({ allowed: false, limit: 1, remaining: 0, retryAfterMs: NEVER, resetAfterMs: NEVER });
  });
});
