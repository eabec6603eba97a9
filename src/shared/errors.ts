/** `error` with a stable `code`, as Node's own errors carry one (PLAN decision 3). */
export function coded<E extends Error>(error: E, code: string): E & { readonly code: string } {
  return Object.assign(error, { code });
}

/**
 * The error a shared limiter's waits settle with once it is closed, and that its calls throw after:
 * its `code` is `ERR_RATEKEEPER_CLOSED`. Closing one thread's limiter leaves the buffer and every
 * other thread's limiter as they were.
 */
export class SharedLimiterClosedError extends Error {
  override readonly name = 'ClosedError';
  readonly code = 'ERR_RATEKEEPER_CLOSED';
}
