// Issue 24, rules per key: a settle, cancel or extension sent under a reservation's rule after its
// key moved to another rule. The store sends it under the rule it was reserved under, without a
// lookup; before the fix the store carried the key back to that rule (a stale settle flipped a
// tenant back to its old plan). The law, for the Redis and PostgreSQL suites alike: the key stays
// under its new rule and answers as the in-memory twin, one KeyedRateLimiter per key reconfigured
// when the key's rule changes, whose settle after a reconfigure refunds nothing and keeps the rule.
import { type AsyncLease, Composite, Concurrency, KeyedRateLimiter, type Lease, ManualClock, type PeekableAlgorithm, Rule } from '../../src/index';
import type { RuleOf, StoreRateLimiter } from '../../src/store/store-rate-limiter';
import { windowOf } from '../../src/store/decision-window';
import { twins } from '../redis/helpers/algorithms';

type Algorithm = keyof typeof twins;

/** What a store limiter under test is made with: its rule function, clock, and in-flight limit (if any). */
export type MakeLimiter = (rule: RuleOf, clock: ManualClock, concurrency?: Concurrency) => StoreRateLimiter<RuleOf>;

/** The rules a key moves between: small ones, and wide ones both ways (2^53 − 1 per 2^42 ms, 2^50 a day). */
export const MOVES: readonly (readonly [Rule, Rule])[] = [
  [new Rule(10, 60_000), new Rule(4, 30_000)],
  [new Rule(Number.MAX_SAFE_INTEGER, Rule.MAX_WINDOW_MS), new Rule(2 ** 50, 86_400_000)],
  [new Rule(2 ** 50, 86_400_000), new Rule(Number.MAX_SAFE_INTEGER, Rule.MAX_WINDOW_MS)],
];

/**
 * Reserves under A, moves the key to B with a call, then settles (below and above what was
 * reserved) and cancels the reservations made under A: what each side answered, in order, then the
 * key's state and a decision after, with the window each store answer was counted under.
 */
export async function staleSettles(algorithm: Algorithm, make: MakeLimiter, [A, B]: readonly [Rule, Rule] = MOVES[0]!): Promise<{ store: unknown[]; memory: unknown[] }> {
  const clock = new ManualClock(1_000_000);
  let rule = A;
  const limiter = make(() => rule, clock);
  const twin = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](A), clock });
  const store: unknown[] = [];
  const memory: unknown[] = [];
  const both = (fromStore: unknown, fromMemory: unknown) => {
    store.push(fromStore);
    memory.push(fromMemory);
  };
  const [r1, r2, r3] = [await limiter.reserve('k', 3), await limiter.reserve('k', 2), await limiter.reserve('k', 1)];
  const [m1, m2, m3] = [twin.reserve('k', 3), twin.reserve('k', 2), twin.reserve('k', 1)];
  both([r1.decision, r2.decision, r3.decision], [m1.decision, m2.decision, m3.decision]);
  clock.advance(1_000);
  rule = B;
  twin.reconfigure(() => new twins[algorithm](B));
  both(await limiter.tryAcquire('k', 1), twin.tryAcquire('k', 1));
  clock.advance(500);
  const settled = await r1.settle(1);
  both([settled, windowOf(settled)], [m1.settle(1), B.windowMs]);
  await r2.cancel();
  m2.cancel();
  both(await limiter.peek('k', 0), twin.peek('k', 0));
  // Above what was reserved: the excess is a charge, made under the key's rule now.
  both(await r3.settle(3), m3.settle(3));
  clock.advance(2_000);
  both(await limiter.peek('k', 0), twin.peek('k', 0));
  both(await limiter.tryAcquire('k', 1), twin.tryAcquire('k', 1));
  return { store, memory };
}

/**
 * With an in-flight limit: leases taken under A, the key moved to B by a lease under B, then an
 * old lease extended past its first end (leases are carried by a rule change), settled and
 * cancelled. What each side answered, in order.
 */
export async function staleLeases(algorithm: Algorithm, make: MakeLimiter, [A, B]: readonly [Rule, Rule] = MOVES[0]!): Promise<{ store: unknown[]; memory: unknown[] }> {
  const clock = new ManualClock(1_000_000);
  const leaseMs = 10_000;
  let rule = A;
  const limiter = make(() => rule, clock, new Concurrency(3, { leaseMs }));
  const composite = (r: Rule) => new Composite([new twins[algorithm](r) as PeekableAlgorithm, new Concurrency(3, { leaseMs })]);
  const twin = new KeyedRateLimiter({ algorithm: () => composite(A), clock });
  const store: unknown[] = [];
  const memory: unknown[] = [];
  const both = (fromStore: unknown, fromMemory: unknown) => {
    store.push(fromStore);
    memory.push(fromMemory);
  };
  const [s1, s2] = [(await limiter.reserve('k', 2)) as AsyncLease, (await limiter.reserve('k', 1)) as AsyncLease];
  const [t1, t2] = [twin.reserve('k', 2) as Lease, twin.reserve('k', 1) as Lease];
  both([s1.decision, s2.decision], [t1.decision, t2.decision]);
  clock.advance(1_000);
  rule = B;
  twin.reconfigure(() => composite(B));
  const s3 = (await limiter.reserve('k', 1)) as AsyncLease;
  const t3 = twin.reserve('k', 1) as Lease;
  both(s3.decision, t3.decision);
  clock.advance(8_000);
  both(await s1.extend(20_000), t1.extend(20_000));
  // Past the first lease's first end: held only by its extension.
  clock.advance(3_000);
  both(await limiter.peek('k', 0), twin.peek('k', 0));
  both(await limiter.peek('k', 1), twin.peek('k', 1));
  both(await s1.settle(1), t1.settle(1));
  // Its lease ended (10 s after its grant): nothing to extend.
  both(await s2.extend(5_000), t2.extend(5_000));
  await s2.cancel();
  t2.cancel();
  both(await limiter.peek('k', 0), twin.peek('k', 0));
  const s4 = (await limiter.reserve('k', 2)) as AsyncLease;
  both(s4.decision, (twin.reserve('k', 2) as Lease).decision);
  return { store, memory };
}
