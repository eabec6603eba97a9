/**
 * The `code` of every error ratekeeper throws or rejects with. Branch on it rather than on
 * `instanceof`: an app that loads both the ESM and the CommonJS build (an ESM app with a CommonJS
 * dependency) has two copies of each class, and an error from one copy is no instance of the other's.
 *
 * - `ERR_RATEKEEPER_INVALID_ARGUMENT`: a `TypeError` for an argument, option or callback result of
 *   the wrong type or shape (a programmer error, never a refusal).
 * - `ERR_RATEKEEPER_OUT_OF_RANGE`: a `RangeError` for a number out of range (a bad rule, `permits`
 *   above the limit, a `NaN` clock reading).
 * - `ERR_RATEKEEPER_ALREADY_SETTLED`: an `Error` from a second `settle` or `cancel` of a granted
 *   reservation (a reservation settles once).
 * - `ERR_RATEKEEPER_STORE_ERROR`: an `Error` handed to `onError` when the Redis or PostgreSQL client
 *   failed with something that is not an `Error` (kept as its `cause`).
 * - `ERR_RATEKEEPER_RATE_LIMITED`: a `RateLimitedError`, from a paced call that would wait too long
 *   (and the `cause` of a call `trpcRateLimit` refuses).
 * - `ERR_RATEKEEPER_STORE_TIMEOUT`: a `RedisTimeoutError` or `PostgresTimeoutError`, handed to `onError`
 *   when the store did not answer within `timeoutMs`.
 * - `ERR_RATEKEEPER_CLOSED`: a `ClosedError`: the limiter was closed, or its store's client was,
 *   while the call waited (or before it began).
 * - `ERR_RATEKEEPER_STORE_REPLY`: an `Error` handed to `onError` when Redis or PostgreSQL answered
 *   something no ratekeeper script or function returns (a wrongly wired adapter).
 * - `ERR_RATEKEEPER_NO_CLIENT_ADDRESS`: an `Error` from HTTP middleware that cannot tell who sent a
 *   request (no peer address, no `key`).
 *
 * @example
 * ```ts
 * import type { ErrorCode } from 'ratekeeper';
 * function isRateLimited(error: unknown): boolean {
 *   const code: ErrorCode | undefined = (error as { code?: ErrorCode } | null)?.code;
 *   return code === 'ERR_RATEKEEPER_RATE_LIMITED';
 * }
 * ```
 */
export type ErrorCode =
  | 'ERR_RATEKEEPER_INVALID_ARGUMENT'
  | 'ERR_RATEKEEPER_ALREADY_SETTLED'
  | 'ERR_RATEKEEPER_STORE_ERROR'
  | 'ERR_RATEKEEPER_OUT_OF_RANGE'
  | 'ERR_RATEKEEPER_RATE_LIMITED'
  | 'ERR_RATEKEEPER_STORE_TIMEOUT'
  | 'ERR_RATEKEEPER_CLOSED'
  | 'ERR_RATEKEEPER_STORE_REPLY'
  | 'ERR_RATEKEEPER_NO_CLIENT_ADDRESS';

/** `error` with its `code` set, as Node's own errors carry one. */
export function coded<E extends Error>(error: E, code: ErrorCode): E & { readonly code: ErrorCode } {
  return Object.assign(error, { code });
}

/** A `TypeError` for a bad argument, with its `code`. */
export function typeError(message: string): TypeError {
  return coded(new TypeError(message), 'ERR_RATEKEEPER_INVALID_ARGUMENT');
}

/** A `RangeError` for a number out of range, with its `code`. */
export function rangeError(message: string): RangeError {
  return coded(new RangeError(message), 'ERR_RATEKEEPER_OUT_OF_RANGE');
}

/**
 * The error waits settle with once their limiter is closed (`close()`, `using`), or once the store
 * they wait on has closed its client; `cause` is the store's error in that case. No timer is left.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(1)) });
 * limiter.tryAcquire('k');
 * const waiting = limiter.acquire('k').catch((error: { code?: string }) => error.code);
 * limiter.close();
 * await waiting; // 'ERR_RATEKEEPER_CLOSED'
 * ```
 */
export class ClosedError extends Error {
  override readonly name = 'ClosedError';
  readonly code = 'ERR_RATEKEEPER_CLOSED';
}
