import type { Clock } from '../core/clock';
import type { Rule } from '../core/rule';
import type { StoreErrorPolicy } from '../redis/outage-policy';
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
export interface PostgresRateLimiterOptions {
  /** A `pg` Pool or Client, or a postgres.js `sql`. */
  client: PostgresClientLike;
  /** Which algorithm decides; each decides exactly as its in-memory twin. */
  algorithm: PostgresAlgorithm;
  /** How many permits a key may use per window. */
  rule: Rule;
  /**
   * The outage policy, required so that it is chosen on purpose: `'allow'`, `'deny'`, or a local
   * `RateLimiter` whose decision is used. Degraded decisions say so in `degraded`.
   */
  onStoreError: StoreErrorPolicy;
  /**
   * The schema {@link migrate} created the table and functions in.
   * @default 'ratekeeper'
   */
  schema?: string | undefined;
  /**
   * Starts every row's key. The full key is `prefix + algorithm + ':' + key` (the row remembers its
   * rule: limiters with different rules on one prefix share each key's usage, carried over from
   * rule to rule); past 2000 bytes (UTF-8) it is stored as `sha256/` and its SHA-256 in hex (an
   * index entry holds at most 2704 bytes).
   * @default 'ratekeeper:'
   */
  prefix?: string | undefined;
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
}
