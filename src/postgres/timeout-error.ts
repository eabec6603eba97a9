/**
 * The error an outage hook receives when PostgreSQL did not answer within `timeoutMs`; the decision
 * is then marked `degraded: 'store-timeout'`. The query itself is not cancelled: set the role's
 * `statement_timeout` to bound it on the server too.
 *
 * @example
 * ```ts
 * import { PostgresTimeoutError } from 'ratekeeper/postgres';
 * const onError = (error: unknown) => {
 *   if (error instanceof PostgresTimeoutError) console.warn(`PostgreSQL slower than ${error.timeoutMs} ms`);
 * };
 * ```
 */
export class PostgresTimeoutError extends Error {
  override readonly name = 'PostgresTimeoutError';
  /** A stable code, for code that tells errors apart by field rather than by class. */
  readonly code = 'ERR_RATEKEEPER_STORE_TIMEOUT';
  /** The bound that was exceeded. */
  readonly timeoutMs: number;

  constructor(timeoutMs: number) {
    super(`ratekeeper: PostgreSQL did not answer within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}
