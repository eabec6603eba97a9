import { StoreTimeoutError } from '../store/timeout';

/**
 * The error an outage hook receives when Redis did not answer within `timeoutMs`; the decision is
 * then marked `degraded: 'store-timeout'`. Tell it by its `code`, which holds across the ESM and
 * CommonJS copies of ratekeeper (`instanceof` does not).
 *
 * @example
 * ```ts
 * import type { RedisTimeoutError } from 'ratekeeper/redis';
 * const onError = (error: unknown) => {
 *   const e = error as Partial<RedisTimeoutError> | null;
 *   if (e?.code === 'ERR_RATEKEEPER_STORE_TIMEOUT') console.warn(`Redis slower than ${e.timeoutMs} ms`);
 * };
 * ```
 */
export class RedisTimeoutError extends StoreTimeoutError {
  override readonly name = 'RedisTimeoutError';

  constructor(timeoutMs: number, what = 'Redis') {
    super(timeoutMs, what);
  }
}
