import type { Concurrency } from '../algorithms/concurrency';
import type { Clock } from '../core/clock';
import type { Rule } from '../core/rule';
import type { StoreErrorPolicy } from '../store/outage-policy';
import type { RuleOf } from '../store/store-rate-limiter';
import type { PostgresClientLike } from './client';
import type { PostgresAlgorithm } from './plans';

/**
 * Options of {@link PostgresRateLimiter}.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { Rule } from 'ratekeeper';
 * import type { PostgresRateLimiterOptions } from 'ratekeeper/postgres';
 * const options: PostgresRateLimiterOptions = {
 *   client: new pg.Pool(),
 *   algorithm: 'token-bucket',
 *   rule: Rule.perMinute(100),
 *   onStoreError: 'allow',
 * };
 * ```
 */
export interface PostgresRateLimiterOptions<R extends Rule | RuleOf = Rule> {
  /** A `pg` Pool or Client, or a postgres.js `sql`. */
  client: PostgresClientLike;
  /** Which algorithm decides; each decides exactly as its in-memory twin. */
  algorithm: PostgresAlgorithm;
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
   * ({@link PostgresInFlightOptions}). Then `tryAcquire`, `charge` and `acquire` reject with
   * `ERR_RATEKEEPER_INVALID_ARGUMENT` (nobody could release their grant). `leaseMs: Infinity` is a
   * RangeError (a store keeps each lease's end), and so is a `limit` above 4096.
   * @default undefined: a rate alone
   */
  concurrency?: Concurrency | undefined;
  /**
   * The schema {@link migrate} created the table and functions in.
   * @default 'ratekeeper'
   */
  schema?: string | undefined;
  /**
   * Starts every row's key. The full key is `prefix + algorithm + ':' + key` (with a `name`,
   * `prefix + name + ':' + algorithm + ':' + key`): the row remembers its rule, so limiters with
   * different rules on one prefix share each key's usage, carried over from rule to rule (give them
   * different `name`s to keep them apart); past 2000 bytes (UTF-8) it is stored as `sha256/` and its
   * SHA-256 in hex (an index entry holds at most 2704 bytes).
   * @default 'ratekeeper:'
   */
  prefix?: string | undefined;
  /**
   * What this limit is for (`'login'`, `'search'`): part of every key, so that two limits with the
   * same prefix and algorithm keep their own counts, whatever their rules (keys do not name the rule). Limiters given the same name (every
   * server of a fleet, say) share each key's count on purpose. Two limiters on one client whose keys
   * would meet without a name to say so are reported once with `console.warn`. No U+0000.
   * @default undefined: no name in the key
   */
  name?: string | undefined;
  /**
   * Where time comes from. Omitted, each decision reads the database server's clock after locking
   * its row, so servers with skewed clocks share one limit and time never runs backwards for a
   * key. Rows expire on the server's clock, so a clock given here should run at real speed.
   * @default the database server's clock
   */
  clock?: Clock | undefined;
  /**
   * The longest a decision waits for PostgreSQL before the outage policy answers, in ms
   * (`Infinity` for no bound): a stopped server, a pool with no free connection, a row lock held
   * by a long transaction. Each statement also sets `lock_timeout` to it, for its own transaction,
   * so a decision stuck behind a held row gives up on the server and frees its connection.
   * @default 500
   */
  timeoutMs?: number | undefined;
  /**
   * Called with the cause whenever the outage policy decides, always an `Error` (a client failing
   * with anything else has it wrapped, as `cause`, code `ERR_RATEKEEPER_STORE_ERROR`); an error it
   * throws is ignored. @default undefined
   */
  onError?: ((error: Error, key: string) => void) | undefined;
  /**
   * Answers a key known to be refused until time T locally, without a round trip, as
   * `RedisRateLimiter`'s `refusalCache` does: until T or for `maxMs` after the refused call was
   * sent, whichever comes first. `true` remembers up to 10,000 keys for up to 1000 ms each.
   * @default false
   */
  refusalCache?: boolean | { maxKeys?: number | undefined; maxMs?: number | undefined } | undefined;
}

/**
 * Options of a {@link PostgresRateLimiter} that is an in-flight limit alone: `concurrency` without
 * `algorithm` and `rule`. Its keys are named `'concurrency'` where an algorithm would be.
 *
 * @example
 * ```ts
 * import { Concurrency } from 'ratekeeper';
 * import type { PostgresInFlightOptions } from 'ratekeeper/postgres';
 * declare const client: PostgresInFlightOptions['client'];
 * const options: PostgresInFlightOptions = { client, concurrency: new Concurrency(2), onStoreError: 'deny' };
 * ```
 */
export type PostgresInFlightOptions = Omit<PostgresRateLimiterOptions, 'algorithm' | 'rule' | 'concurrency'> & {
  // Only ever undefined, so passing `undefined` for them type-checks under exactOptionalPropertyTypes too.
  algorithm?: undefined;
  rule?: undefined;
  concurrency: Concurrency;
};
