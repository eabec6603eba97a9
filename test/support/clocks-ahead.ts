// The store's search for the first time a rate and an in-flight part allow together, with a part's
// clock far ahead of the call's reading (an extension or a settle at a later reading, then a call
// at an earlier one: two processes whose clocks disagree). Shared by the Redis and PostgreSQL
// in-flight suites; the twin is the in-memory Composite given the same readings. Before the store
// searched as Composite does, it stepped by the same short retry up to 2^40 times: the call never
// came back (the test's timeout).
import { expect } from 'vitest';
import { Composite, Concurrency, type Decision, type ManualClock, type Receipt, Rule, TokenBucket } from '../../src/index';
import type { AsyncLease } from '../../src/limiter/reservation';
import type { StoreRateLimiter } from '../../src/store/store-rate-limiter';

/** A token bucket store limiter with `concurrency`, reading `clock`. */
export type MakeLimiter = (rule: Rule, concurrency: Concurrency, clock: ManualClock) => StoreRateLimiter<Rule>;

const START = 1_764_000_000_000;

/** An extension at a later reading, then a peek at the first: the in-flight part's clock is 2^41 ms ahead. */
export async function extendedAhead(make: MakeLimiter, clock: ManualClock): Promise<void> {
  const rule = new Rule(10, 1000);
  // Held for as long as a lease may be, so that it is still held at the later reading.
  const store = make(rule, new Concurrency(1, { leaseMs: 2 ** 42 }), clock);
  const twin = new Composite([new TokenBucket(rule), new Concurrency(1, { leaseMs: 2 ** 42 })]);
  clock.set(START);
  const lease = (await store.reserve('k')) as AsyncLease;
  const { receipt } = twin.reserve(START);
  clock.set(START + 2 ** 41);
  expect(await lease.extend(1)).toBe(true);
  expect(twin.extend(START + 2 ** 41, receipt as Receipt, 1)).toBe(true);
  clock.set(START);
  const expected = twin.peek(START);
  // Held until 2^41 + 1 from the reading, as far as time goes.
  expect(expected).toMatchObject({ allowed: false, retryAfterMs: 2 ** 41 + 1 });
  expect(await store.peek('k')).toEqual(expected);
  expect((await store.reserve('k')).decision).toEqual(twin.reserve(START).decision);
}

/** A settle past the reservation at a later reading, then a reservation at the first: the rate's clock is 2^40 ms ahead, in debt there. */
export async function chargedAhead(make: MakeLimiter, clock: ManualClock): Promise<void> {
  const rule = new Rule(1000, 1000);
  const store = make(rule, new Concurrency(4, { leaseMs: 60_000 }), clock);
  const bucket = new TokenBucket(rule);
  const twin = new Composite([bucket, new Concurrency(4, { leaseMs: 60_000 })]);
  clock.set(START);
  const lease = (await store.reserve('k')) as AsyncLease;
  const { receipt } = twin.reserve(START);
  // A settle of 1002: the lease released, the 1001 past the reservation charged to the rate alone
  // (as the keyed limiter settles a lease), leaving the bucket a token in debt at that reading.
  clock.set(START + 2 ** 40);
  await lease.settle(1002);
  twin.release(START + 2 ** 40, receipt as Receipt);
  twin.refund(START + 2 ** 40, receipt as Receipt, 0);
  bucket.charge(START + 2 ** 40, 1001);
  clock.set(START);
  const expected: Decision = twin.reserve(START).decision;
  // Two tokens short, 2 ms after the bucket's reading: that far past the call's.
  expect(expected).toMatchObject({ allowed: false, retryAfterMs: 2 ** 40 + 2 });
  expect((await store.reserve('k')).decision).toEqual(expected);
  expect(await store.peek('k', 3)).toEqual(twin.peek(START, 3));
}
