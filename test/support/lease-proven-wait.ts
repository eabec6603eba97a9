// A waiting lease over a store answers as KeyedRateLimiter.lease does: at once, ungranted, when the
// rate (or a block) proves the wait longer than its maxWaitMs, and waiting for a release when only
// the in-flight part refuses. Shared by the Redis and PostgreSQL in-flight suites: each gives a
// limiter over a client that counts the script calls or statements it sends. The clock is a
// ManualScheduler that only the test moves, so a lease that waits for a re-check never answers
// (before the store's reply carried the rate's wait, the first test ran into its timeout).
import { expect } from 'vitest';
import { type AsyncLease, Composite, Concurrency, KeyedRateLimiter, type Lease, ManualScheduler, Rule, TokenBucket } from '../../src/index';
import type { StoreRateLimiter } from '../../src/store/store-rate-limiter';

/** A store limiter with `concurrency` (and a token bucket at `rule`, when given), reading `clock`, and how many calls its client has sent so far. */
export type CountedLimiter = (concurrency: Concurrency, clock: ManualScheduler, rule?: Rule) => { limiter: StoreRateLimiter<Rule>; sent: () => number };

/** A rate whose next permit is a minute away: a lease that may wait 10 s is refused at once, after one call, and nothing is sent later. */
export async function rateProvesTheWait(make: CountedLimiter): Promise<void> {
  const rule = new Rule(1, 60_000);
  const clock = new ManualScheduler(1_000_000);
  const { limiter, sent } = make(new Concurrency(2, { leaseMs: 30_000 }), clock, rule);
  const memory = new KeyedRateLimiter({ algorithm: () => new Composite([new TokenBucket(rule), new Concurrency(2, { leaseMs: 30_000 })]), clock: new ManualScheduler(1_000_000) });
  await (await limiter.lease('k')).settle(1); // the rate keeps its 1, the in-flight permit is free again
  (memory.reserve('k') as Lease).settle(1);
  const before = sent();
  const lease = await refusedAtOnce(limiter, sent, memory);
  // No re-check is left behind either.
  await clock.advanceAsync(20_000);
  expect(sent() - before).toBe(1);
  expect(await lease.extend(1000)).toBe(false);
}

/** An in-flight limit alone on a key blocked for a minute: the block proves the wait. */
export async function blockProvesTheWait(make: CountedLimiter): Promise<void> {
  const clock = new ManualScheduler(1_000_000);
  const { limiter, sent } = make(new Concurrency(1, { leaseMs: 30_000 }), clock);
  const memory = new KeyedRateLimiter({ algorithm: () => new Concurrency(1, { leaseMs: 30_000 }), clock: new ManualScheduler(1_000_000) });
  await limiter.block('k', 60_000);
  memory.block('k', 60_000);
  await refusedAtOnce(limiter, sent, memory);
}

/** A lease of 'k' that may wait 10 s where a grant is a minute away: refused at once as the in-memory twin's is, after one call. */
async function refusedAtOnce(limiter: StoreRateLimiter<Rule>, sent: () => number, memory: KeyedRateLimiter): Promise<AsyncLease> {
  const before = sent();
  const lease = await limiter.lease('k', 1, { maxWaitMs: 10_000 });
  const inMemory = await memory.lease('k', 1, { maxWaitMs: 10_000 });
  expect(inMemory.decision).toMatchObject({ allowed: false, retryAfterMs: 60_000 });
  expect(lease.decision).toEqual(inMemory.decision);
  expect(sent() - before).toBe(1);
  return lease;
}

/** Both in-flight permits held, the rate far from its limit: the refusal's retry (the lease's end) proves nothing, so the lease waits and is granted on the release. */
export async function onlyInFlightWaits(make: CountedLimiter): Promise<void> {
  const clock = new ManualScheduler(1_000_000);
  const { limiter, sent } = make(new Concurrency(1, { leaseMs: 60_000 }), clock, new Rule(100, 60_000));
  const held = await limiter.lease('k');
  let answered = false;
  const waiting = limiter.lease('k', 1, { maxWaitMs: 10_000 }).then((lease) => ((answered = true), lease));
  // Calls on one key reach the store in order: once this peek is back, the waiting lease's try has been refused.
  expect(await limiter.peek('k')).toMatchObject({ allowed: false, retryAfterMs: 60_000 });
  const tries = sent();
  await clock.advanceAsync(100); // the re-check: refused again, still waiting
  await limiter.peek('k');
  expect(sent()).toBe(tries + 2);
  expect(answered).toBe(false);
  await held.settle(1);
  const lease = await waiting;
  expect(lease.decision).toMatchObject({ allowed: true, limit: 1, remaining: 0 });
  await lease.settle(1);
}
