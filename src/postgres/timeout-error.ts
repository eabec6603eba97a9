import { StoreTimeoutError } from '../store/timeout';

/**
 * The error an outage hook receives when PostgreSQL did not answer within `timeoutMs`; the decision
 * is then marked `degraded: 'store-timeout'`. Tell it by its `code`, which holds across the ESM and
 * CommonJS copies of ratekeeper (`instanceof` does not). A decision waiting for a row lock gives up
 * on the server too (its `lock_timeout` is `timeoutMs`); anything else slow is not cancelled: set
 * the role's `statement_timeout` to bound it.
 *
 * @example
 * ```ts
 * import type { PostgresTimeoutError } from 'ratekeeper/postgres';
 * const onError = (error: unknown) => {
 *   const e = error as Partial<PostgresTimeoutError> | null;
 *   if (e?.code === 'ERR_RATEKEEPER_STORE_TIMEOUT') console.warn(`PostgreSQL slower than ${e.timeoutMs} ms`);
 * };
 * ```
 */
export class PostgresTimeoutError extends StoreTimeoutError {
  override readonly name = 'PostgresTimeoutError';

  /**
   * @param cause the server's own error, when its `lock_timeout` ended the wait first.
   * @param what what did not answer, when not the database (a fallback limiter, a rule function).
   */
  constructor(timeoutMs: number, cause?: unknown, what = 'PostgreSQL') {
    super(timeoutMs, what, cause);
  }
}
