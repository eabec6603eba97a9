import type { Concurrency } from '../algorithms/concurrency';
import type { Clock } from '../core/clock';
import type { Rule } from '../core/rule';
import type { RedisClientLike } from './client';
import type { StoreErrorPolicy } from '../store/outage-policy';
import type { RuleOf } from '../store/store-rate-limiter';
import type { RedisAlgorithm } from './scripts';

/**
 * Options of {@link RedisRateLimiter}.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { Rule } from 'ratekeeper';
 * import type { RedisRateLimiterOptions } from 'ratekeeper/redis';
 * const options: RedisRateLimiterOptions = {
 *   client: new Redis(),
 *   algorithm: 'sliding-window-counter',
 *   rule: Rule.perMinute(100),
 *   onStoreError: 'allow',
 * };
 * ```
 */
export interface RedisRateLimiterOptions<R extends Rule | RuleOf = Rule> {
  /** An ioredis (or iovalkey) client or cluster, a node-redis client or cluster, a Valkey GLIDE client or cluster client, or a {@link RedisScriptClient} such as `@upstash/redis`. */
  client: RedisClientLike;
  /** Which algorithm decides; each decides exactly as its in-memory twin. */
  algorithm: RedisAlgorithm;
  /**
   * How many permits a key may use per window: one `Rule` for every key, or a function of the key
   * answering its rule (a tenant's plan), at once or as a promise, called on every call within
   * `timeoutMs` (see docs/stores.md, "Rules per key").
   */
  rule: R | RuleOf;
  /**
   * The outage policy, required so that it is chosen on purpose: `'allow'`, `'deny'`, or a local
   * `RateLimiter` whose decision is used. Degraded decisions say so in `degraded`.
   */
  onStoreError: StoreErrorPolicy;
  /**
   * An in-flight limit beside the rate: at most `limit` permits held at once per key, each from its
   * grant (`reserve`, `lease`) until settled or cancelled, or until `leaseMs` after the grant (a
   * holder that crashed gives its permits back then). With `algorithm` and `rule`, "100 a minute
   * and 2 at once" is one all-or-nothing decision, as the in-memory
   * `Composite([algorithm(rule), concurrency])`; omit both for an in-flight limit alone
   * ({@link RedisInFlightOptions}). Then `tryAcquire`, `charge` and `acquire` reject with
   * `ERR_RATEKEEPER_INVALID_ARGUMENT` (nobody could release their grant). `leaseMs: Infinity` is a
   * RangeError (a store keeps each lease's end), and so is a `limit` above 4096.
   * @default undefined: a rate alone
   */
  concurrency?: Concurrency | undefined;
  /**
   * Starts every Redis key. The full key is `prefix + algorithm + ':' + key` (with a `name`,
   * `prefix + name + ':' + algorithm + ':' + key`): the key remembers its rule, so limiters with
   * different rules under one prefix share each key's usage unless their names differ.
   * @default 'ratekeeper:'
   */
  prefix?: string | undefined;
  /**
   * What this limit is for (`'login'`, `'search'`): part of every key, so that two limits with the
   * same prefix and algorithm keep their own counts, whatever their rules (keys do not name the rule). Limiters given the same name (every
   * server of a fleet, say) share each key's count on purpose. Two limiters on one client whose keys
   * would meet without a name to say so are reported once with `console.warn`.
   * @default undefined: no name in the key
   */
  name?: string | undefined;
  /**
   * Where time comes from. Omitted, each decision reads the Redis server's own clock (`TIME`), so
   * servers with skewed clocks still share one limit. Redis expires keys on its own clock, so a
   * clock given here should run at real speed; a `ManualClock` suits tests with windows of seconds.
   * @default the Redis server's clock
   */
  clock?: Clock | undefined;
  /**
   * The longest a decision waits for Redis before the outage policy answers, in ms (`Infinity` for
   * no bound). It covers a client that queues commands while disconnected and a frozen server.
   * @default 500
   */
  timeoutMs?: number | undefined;
  /**
   * Called with the cause whenever the outage policy decides (a `RedisTimeoutError` for a timeout;
   * a client that fails with something other than an `Error` has it wrapped, as `cause`, in one),
   * so `error.message` always reads. An error it throws is ignored. @default undefined
   */
  onError?: ((error: Error, key: string) => void) | undefined;
  /**
   * Answers a key known to be refused until time T locally, without a round trip, until T or for
   * `maxMs` after the refused call was sent, whichever comes first: another server's `reset` or
   * refund goes unseen here for at most that long. `true` remembers up to 10,000 keys for up to
   * 1000 ms each; `{ maxKeys, maxMs }` sets either bound (both positive integers). `retryAfterMs`
   * counts down to T exactly; `remaining` is the value Redis last gave.
   * @default false
   */
  refusalCache?: boolean | { maxKeys?: number | undefined; maxMs?: number | undefined } | undefined;
  /**
   * Sends the calls made while a script call is in flight together in the next one (up to 16 keys
   * a call), and a call that finds nothing in flight at once, each deciding exactly as if sent
   * alone in the order asked. On a Redis Cluster client (ioredis `Cluster`, node-redis
   * `createCluster`, GLIDE `GlideClusterClient`) a batch holds keys of one hash slot. Set `false` when
   * the client routes each call by its first key in some other way (a sharding proxy, or an
   * adapter in front of a cluster): each decision is then one call on one key.
   * @default true
   */
  batch?: boolean | undefined;
}

/**
 * Options of a {@link RedisRateLimiter} that is an in-flight limit alone: `concurrency` without
 * `algorithm` and `rule`. Its keys are named `'concurrency'` where an algorithm would be.
 *
 * @example
 * ```ts
 * import { Concurrency } from 'ratekeeper';
 * import type { RedisInFlightOptions } from 'ratekeeper/redis';
 * declare const client: RedisInFlightOptions['client'];
 * const options: RedisInFlightOptions = { client, concurrency: new Concurrency(2), onStoreError: 'deny' };
 * ```
 */
export type RedisInFlightOptions = Omit<RedisRateLimiterOptions, 'algorithm' | 'rule' | 'concurrency'> & {
  // Only ever undefined, so passing `undefined` for them type-checks under exactOptionalPropertyTypes too.
  algorithm?: undefined;
  rule?: undefined;
  concurrency: Concurrency;
};
