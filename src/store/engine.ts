import type { Decision } from '../core/decision';
import type { Rule } from '../core/rule';
import type { Flight } from './coalescer';
import type { Bounded } from './timeout';

/**
 * The algorithms every store runs, named as in memory: `'token-bucket'` is `TokenBucket`, and so on
 * (`RedisAlgorithm` and `PostgresAlgorithm` are this).
 */
export type StoreAlgorithm = 'token-bucket' | 'leaky-bucket' | 'fixed-window' | 'sliding-window-log' | 'sliding-window-counter';

/**
 * What a call asks of a key: a decision (`tryAcquire`), or one of the key operations. `extend`
 * holds a lease longer (only a limiter with an in-flight limit sends it).
 */
export type Operation = 'decide' | 'peek' | 'charge' | 'reserve' | 'refund' | 'block' | 'reset' | 'extend';

/**
 * A store limiter's in-flight limit (its `concurrency` option), as every call of such a limiter
 * carries it: at most `limit` permits held at once per key, each lease ending `leaseMs` after its
 * grant unless released or extended first (`leaseMs` whole, 1 to 2^42; `limit` 1 to
 * {@link MAX_IN_FLIGHT}). Its leases live with the rate state, in the same key or row, so that a
 * call decides both atomically:
 * - every call on the key first drops the leases whose end is at or before the call's time;
 * - `reserve` grants only when the rate (if any) and the free permits both allow, decided as the
 *   in-memory `Composite([rate, concurrency])` decides (or `Concurrency` alone), and then stores
 *   the lease `(receipt, amount, now + leaseMs)` under the reservation's receipt;
 * - `refund` and `charge` with a receipt release that receipt's lease (a charge then spends the
 *   rate only), answering the state after as the composite's `peek(now, 0)`;
 * - `extend` (amount: ms) sets the lease of `receipt` to end at `now + amount` if it is still held,
 *   answered with no decision and `held` (see StoreCall.answer);
 * - a rule change carries the leases over; `reset` drops them; the key's expiry covers the latest end.
 */
export interface InFlightLimit {
  readonly limit: number;
  readonly leaseMs: number;
}

/**
 * The largest in-flight `limit` a store limiter takes: each lease holds at least one permit, so a
 * key holds at most this many leases, and every call reads them all.
 */
export const MAX_IN_FLIGHT = 4096;

/**
 * One call on one key, as the store layer hands it to an engine: everything the engine needs to
 * send it, and the two ways to answer it. The layer has checked the key, the permits and the
 * rule; the engine only sends, reads the reply, and answers each call once.
 */
export interface StoreCall extends Bounded {
  readonly op: Operation;
  /** The caller's key: the engine stores it under its limiter's namespace. */
  readonly key: string;
  /** The key's rule for this call: a function of the key may give each key (and each call) its own. */
  readonly rule: Rule;
  /** Permits (a decision, peek, charge, reservation or refund), or a block's or extension's duration in ms. */
  readonly amount: number;
  /** The limiter's in-flight limit, or undefined for a rate alone (then `decide` and `extend` never come). */
  readonly concurrency: InFlightLimit | undefined;
  /** The caller's clock reading, or undefined when the store's clock decides. */
  readonly now: number | undefined;
  /** A refund's (or an extension's) receipt, as the engine gave it with the reservation's answer. */
  readonly receipt: unknown;
  /** The engine's own note on the call once sent (say, the script call it went in); the layer never reads it. */
  sent: unknown;
  /** The engine's own place for the call in the order it sent calls (Redis on a cluster, see RedisEngine's #waited); the layer never reads it. */
  order: number;
  /**
   * The store's answer: the decision (none for `block`, `reset` and `extend`), and a granted
   * reservation's receipt, or for `extend` whether the lease was still held (a boolean). A refused
   * reservation with an in-flight limit also gives `provenMs`, the wait its rate and block prove:
   * unlike its retry, no release can end it sooner. `rule`: the rule the key is counted under, when
   * a `refund` found it under another than the call's (a refund or an extension never changes a
   * key's rule: it acts under the key's own), which the decision reports. Ignored once the call is
   * answered (its timeout came first).
   */
  answer(decision: Decision | undefined, receipt?: unknown, provenMs?: number, rule?: Rule): void;
  /**
   * The store failed this call: a decision, peek or reservation is answered by the outage policy,
   * any other operation rejects with `error`. Ignored once the call is answered.
   */
  fail(error: unknown): void;
}

/**
 * A store (Redis, PostgreSQL) under the store layer: it sends batches of calls on keys and answers
 * each call. Everything else (checking, rules, the outage policy, timeouts, batching, the refusal
 * cache, waiting) is the layer's, written once.
 */
export interface StoreEngine {
  /** The store's name in messages: `'Redis'`, `'PostgreSQL'`. */
  readonly store: string;
  /** The most calls one batch carries. */
  readonly maxBatch: number;
  /** Whether batches sent apart still reach the store in order (then a full batch goes beside the round). */
  readonly ordered: boolean;
  /**
   * Whether key operations travel through the batches, in their turn among the calls on their key;
   * otherwise each is sent alone at once (Redis: `await` orders them).
   */
  readonly batchesOperations: boolean;
  /** @throws TypeError for a key this store cannot hold (beyond what every store checks). */
  checkKey(key: string): void;
  /** The batch group of a caller's key: calls of one group may share a batch (a hash slot on a Redis Cluster). */
  group(key: string): number;
  /**
   * Sends `calls`: decisions of one group and one rule, or one key operation (or, when operations
   * are batched, calls of one rule); `flight.release()` once answered.
   */
  send(calls: StoreCall[], flight: Flight): void;
  /** A call sent (or held) was answered by its timeout: let go of what it holds back. */
  timedOut(call: StoreCall): void;
  /** The store's timeout error (`what` did not answer: the store by default, or a fallback limiter, a rule function). */
  timeoutError(timeoutMs: number, what?: string): Error;
  /** True once the client can never answer again: a refused waiter then ends with a `ClosedError`. */
  clientClosed(): boolean;
  /** Present when an admission's parts on this store can be decided in one atomic call. */
  readonly joint?: JointEngine | undefined;
}

/**
 * What an engine offers when reservations on several keys can be decided in one atomic call (Redis:
 * one script over one client, keys of one hash slot): all granted, or none and each answered as
 * its `reserve` would have been, those after the first refusal as their `peek`.
 */
export interface JointEngine {
  /** What parts must share to join one call: the client. */
  readonly together: unknown;
  /** The partition of the client a key is in (a Cluster's hash slot, 0 on one server); the key is checked. */
  slot(key: string): number;
  /** A reservation call as the joint call carries it (its receipt drawn), readable by any engine of its kind. */
  prepare(call: StoreCall): unknown;
  /** Sends the prepared reservations, in order, as one call, and answers each of `calls` (the receipt with a grant). */
  send(calls: readonly StoreCall[], prepared: readonly unknown[]): void;
}
