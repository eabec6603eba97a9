import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { ClosedError, Composite, Concurrency, KeyedRateLimiter, ManualScheduler, Rule, TokenBucket, type Decision, type Lease, type PeekableAlgorithm, type Scheduler } from '../../src/index';
import { MAX_LEASE_MS } from '../../src/algorithms/concurrency';
import { algorithms } from '../support/algorithms';

// A decision is made in a bounded number of steps whatever the rules and clock readings: wide rules
// (limits up to 2^50, windows and leases up to 2^42) beside an in-flight part, and parts whose
// clocks ran ahead of the composite's. A loop that would run for ever instead runs into the budget
// of peeks below, which throws: the test fails rather than hangs.

/** The most part peeks one call may make: a few full searches over 2^42 ms, far below a loop's. */
const BUDGET = 2_000;

/** Counts every peek of the parts it wraps, throwing past the budget of the call under way. */
class Counter {
  peeks = 0;

  /** The part itself, its `peek` counted (every other method forwarded as it is). */
  wrap<P extends PeekableAlgorithm>(part: P): P {
    return new Proxy(part, {
      get: (target, name, receiver) => {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (name !== 'peek') return value;
        return (nowMs: number, permits?: number) => {
          if (++this.peeks > BUDGET) throw new Error(`more than ${BUDGET} part peeks for one decision`);
          return target.peek(nowMs, permits);
        };
      },
    });
  }

  /** Runs one call with a fresh budget. */
  call<T>(run: () => T): T {
    this.peeks = 0;
    return run();
  }
}

const wideRuleArb = fc
  .record({
    limit: fc.oneof(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 1, max: 2 ** 50 }), fc.constant(2 ** 50)),
    windowMs: fc.oneof(fc.integer({ min: 1, max: 2000 }), fc.integer({ min: 1, max: 2 ** 42 }), fc.constant(2 ** 42)),
  })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

const leaseArb = fc.oneof(fc.integer({ min: 1, max: 2000 }), fc.integer({ min: 1, max: 2 ** 42 }), fc.constant(2 ** 42), fc.constant(Infinity));
const msArb = fc.oneof(fc.integer({ min: 1, max: 2000 }), fc.integer({ min: 1, max: 2 ** 42 }), fc.constant(Infinity));
const permitsArb = fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 2 ** 50 }));
const dtArb = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 0, max: 2 ** 42 }), fc.integer({ min: -(2 ** 42), max: -1 }), fc.integer({ min: -4000, max: 4000 }).map((q) => q / 4));

type Op =
  | { readonly kind: 'reserve' | 'peek' | 'lease'; readonly permits: number; readonly dt: number }
  | { readonly kind: 'settle'; readonly pick: number; readonly actual: number; readonly dt: number }
  | { readonly kind: 'cancel'; readonly pick: number; readonly dt: number }
  | { readonly kind: 'extend'; readonly pick: number; readonly ms: number; readonly dt: number }
  | { readonly kind: 'state' | 'reset'; readonly dt: number }
  | { readonly kind: 'block'; readonly ms: number; readonly dt: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constantFrom('reserve' as const, 'peek' as const, 'lease' as const), permits: permitsArb, dt: dtArb }),
  fc.record({ kind: fc.constant('settle' as const), pick: fc.nat(), actual: fc.oneof(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 2 ** 51 })), dt: dtArb }),
  fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat(), dt: dtArb }),
  fc.record({ kind: fc.constant('extend' as const), pick: fc.nat(), ms: msArb, dt: dtArb }),
  fc.record({ kind: fc.constantFrom('state' as const, 'reset' as const), dt: dtArb }),
  fc.record({ kind: fc.constant('block' as const), ms: fc.integer({ min: 1, max: 2 ** 42 }), dt: dtArb }),
);

const caseArb = fc
  .record({
    kind: fc.integer({ min: -1, max: algorithms.length - 1 }), // -1: the in-flight part alone
    rule: wideRuleArb,
    limit: fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 2 ** 50 })),
    leaseMs: leaseArb,
    start: fc.oneof(fc.constant(0), fc.constant(1_764_000_000_123)),
    ops: fc.array(opArb, { maxLength: 40, size: 'max' }),
  })
  // A request fits every part: at most the smallest limit.
  .map((c) => ({ ...c, most: c.kind === -1 ? c.limit : Math.min(c.limit, c.rule.limit) }));

/**
 * A refusal's retry is a moment every part allows together (2^42: only a release makes room), and
 * on an integer reading not one ms before it: exact, the in-flight part's too as far as time goes.
 * (On a fractional reading a part's own retry may round up by a ms, see fractional-clock.test.ts.)
 */
function expectExactRetry(state: PeekableAlgorithm, now: number, permits: number): void {
  const { allowed, retryAfterMs } = state.peek(now, permits);
  if (allowed) return;
  if (retryAfterMs < MAX_LEASE_MS) expect(state.peek(now + retryAfterMs, permits).allowed).toBe(true);
  if (retryAfterMs > 1 && Number.isInteger(now)) expect(state.peek(now + retryAfterMs - 1, permits).allowed).toBe(false);
}

/** A scheduler whose reading the test sets, backward too; its timers are a ManualScheduler's, never fired. */
function settable(start: number): Scheduler & { reading: number } {
  const timers = new ManualScheduler();
  return {
    reading: start,
    now() {
      return this.reading;
    },
    setTimeout: (callback, ms) => timers.setTimeout(callback, ms),
    clearTimeout: (handle) => timers.clearTimeout(handle),
  };
}

/** The in-flight part alone answers within 2^42 (a rate beside it may answer longer: its window's). */
function expectWithinLease(decision: Decision, alone: boolean): void {
  if (!alone) return;
  expect(decision.retryAfterMs).toBeLessThanOrEqual(MAX_LEASE_MS);
  expect(decision.resetAfterMs).toBeLessThanOrEqual(MAX_LEASE_MS);
}

describe('Composite with an in-flight part: every decision in bounded steps', () => {
  it('answers a lease extended at a later reading, asked at an earlier one, in a few steps (stepped 1 ms at a time to 2^41 before)', () => {
    const counter = new Counter();
    const composite = new Composite([counter.wrap(new TokenBucket(new Rule(10, 1000))), counter.wrap(new Concurrency(1, { leaseMs: 2 ** 42 }))]);
    const { receipt } = composite.reserve(0);
    // The in-flight part's clock is now 2^41, the composite's (its latest grant) still 0.
    expect(composite.extend(2 ** 41, receipt as never, 1)).toBe(true);
    const decision = counter.call(() => composite.peek(0));
    // The lease ends at 2^41 + 1: from the reading 0, that long (as many ms as the in-flight part's clock is ahead, and 1).
    expect(decision).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 2 ** 41 + 1, resetAfterMs: 2 ** 41 + 1 });
    expect(counter.peeks).toBeLessThan(200);
    expect(composite.peek(2 ** 41 + 1).allowed).toBe(true);
  });

  it('answers a rate part refunded at a later reading, asked at an earlier one, in a few steps', () => {
    const counter = new Counter();
    const composite = new Composite([counter.wrap(new TokenBucket(new Rule(1, 1))), counter.wrap(new Concurrency(1, { leaseMs: 1 }))]);
    const start = 1_764_000_000_123;
    const first = composite.reserve(start - 1).receipt as never;
    // A cancel at a much later reading moves the bucket's clock there; the composite's stays at its grant.
    composite.release(start + 2 ** 40, first);
    composite.refund(start + 2 ** 40, first, 1);
    const decision = counter.call(() => composite.reserve(start - 1).decision);
    expect(decision.allowed).toBe(true);
    expect(counter.call(() => composite.peek(start - 1))).toMatchObject({ allowed: false, retryAfterMs: 2 ** 40 + 2 });
    expect(counter.peeks).toBeLessThan(200);
  });

  it('a lease asked behind a waiter at a reading before an extension is answered at once (looped through 2^41 ms before)', async () => {
    const counter = new Counter();
    const clock = settable(0);
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([counter.wrap(new TokenBucket(new Rule(10, 1000))), counter.wrap(new Concurrency(2, { leaseMs: 2 ** 42 }))]),
      clock,
    });
    const held = limiter.reserve('k', 2) as Lease;
    const waiting = limiter.lease('k', 2); // in line: both in-flight permits are held
    clock.reading = 2 ** 41;
    expect(held.extend(1)).toBe(true);
    // A clock gone back: the lease behind the waiter checks its permits against the key's state at that reading.
    clock.reading = 0;
    const behind = counter.call(() => limiter.lease('k', 2));
    expect(counter.peeks).toBeLessThan(200);
    limiter.close();
    await expect(waiting).rejects.toBeInstanceOf(ClosedError);
    await expect(behind).rejects.toBeInstanceOf(ClosedError);
  });

  test.prop([caseArb])('a keyed limiter answers every call within the budget, wide rules and backward clocks included', async ({ kind, rule, limit, most, leaseMs, start, ops }) => {
    const counter = new Counter();
    const clock = settable(start);
    const make = () => {
      const inFlight = counter.wrap(new Concurrency(limit, { leaseMs }));
      return kind === -1 ? inFlight : new Composite([counter.wrap((algorithms[kind] as (typeof algorithms)[number]).make(rule)), inFlight]);
    };
    const limiter = new KeyedRateLimiter({ algorithm: make, clock });
    const held: Lease[] = [];
    const pick = (i: number) => held.splice(i % held.length, 1)[0] as Lease;
    const waiting: Promise<Lease>[] = [];
    for (const op of ops) {
      clock.reading = Math.max(0, clock.reading + op.dt);
      counter.call(() => {
        if (op.kind === 'reserve') {
          const reservation = limiter.reserve('k', Math.min(op.permits, most)) as Lease;
          if (reservation.decision.allowed) held.push(reservation);
          expectWithinLease(reservation.decision, kind === -1);
        } else if (op.kind === 'peek') expectWithinLease(limiter.peek('k', Math.min(op.permits, most)), kind === -1);
        // Behind a waiter, a lease checks its permits against the key's state at the raw reading.
        else if (op.kind === 'lease') waiting.push(limiter.lease('k', Math.min(op.permits, most)));
        else if (op.kind === 'state') expectWithinLease(limiter.peek('k', 0), kind === -1);
        else if (op.kind === 'reset') limiter.reset('k');
        else if (op.kind === 'block') limiter.block('k', op.ms);
        else if (held.length > 0) {
          if (op.kind === 'settle') pick(op.pick).settle(op.actual);
          else if (op.kind === 'cancel') pick(op.pick).cancel();
          else if (op.kind === 'extend') (held[op.pick % held.length] as Lease).extend(op.ms);
        }
      });
    }
    limiter.close();
    // Granted at once, or waiting until the close: never failed by the budget.
    for (const outcome of await Promise.allSettled(waiting)) if (outcome.status === 'rejected') expect(outcome.reason).toBeInstanceOf(ClosedError);
  });

  test.prop([caseArb.filter(({ kind }) => kind !== -1)])(
    'Composite.peek and reserve straight on the parts: within the budget, the retry exact, whatever each part’s own clock',
    ({ kind, rule, limit, most, leaseMs, start, ops }) => {
      const counter = new Counter();
      const composite = new Composite([
        counter.wrap((algorithms[kind] as (typeof algorithms)[number]).make(rule)),
        counter.wrap(new Concurrency(limit, { leaseMs })),
      ]);
      const receipts: unknown[] = [];
      let now: number = start;
      // The composite counts a reading before its latest grant as that grant's: its retry is from there.
      let granted = -Infinity;
      for (const op of ops) {
        // Readings go backward here too (no keyed limiter holds them to the latest): a refund or an
        // extension then leaves a part's clock ahead of the composite's.
        now = Math.max(0, now + op.dt);
        counter.call(() => {
          if (op.kind === 'reserve' || op.kind === 'lease') {
            const { receipt } = composite.reserve(now, Math.min(op.permits, most));
            if (receipt !== undefined) {
              receipts.push(receipt);
              granted = Math.max(granted, now);
            }
          } else if (op.kind === 'peek') expectExactRetry(composite, Math.max(now, granted), Math.min(op.permits, most));
          else if (op.kind === 'state') composite.peek(now, 0);
          else if (receipts.length > 0 && (op.kind === 'settle' || op.kind === 'cancel' || op.kind === 'extend')) {
            const receipt = receipts[op.pick % receipts.length] as never;
            if (op.kind === 'extend') composite.extend(now, receipt, op.ms);
            else {
              receipts.splice(op.pick % receipts.length, 1);
              composite.release(now, receipt);
              composite.refund(now, receipt, op.kind === 'cancel' ? most : op.actual);
            }
          }
        });
      }
    },
  );
});
