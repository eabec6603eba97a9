import { rangeError, typeError } from '../core/errors';
import { assertNumber, describe } from '../core/validate';

/**
 * How long `acquire` may wait, and how to stop it.
 *
 * @example
 * ```ts
 * import type { AcquireOptions } from 'ratekeeper';
 * const options: AcquireOptions = { signal: AbortSignal.timeout(5000), maxWaitMs: 2000 };
 * ```
 */
export interface AcquireOptions {
  /**
   * Cancels the wait: the promise rejects with `signal.reason`, nothing is spent, and those queued
   * behind move up. @default undefined (wait until granted)
   */
  signal?: AbortSignal | undefined;
  /**
   * The longest wait accepted, in ms, from 0 to `Infinity`. A request that would wait longer resolves
   * with the `Rejected` decision as soon as that is known: at once when nobody is ahead of it, and
   * on a `KeyedRateLimiter` also when the first in line, or its own permits, cannot be ready in time.
   * @default Infinity (no limit)
   */
  maxWaitMs?: number | undefined;
}

/** No options: one object for every call made without any (a line of leases reads them per call). */
const DEFAULTS: { readonly signal: undefined; readonly maxWaitMs: number } = { signal: undefined, maxWaitMs: Infinity };

/** Checks `acquire` options eagerly, so a bad one throws before anything is queued. */
export function readAcquireOptions(options: unknown): { readonly signal: AbortSignal | undefined; readonly maxWaitMs: number } {
  if (options === undefined) return DEFAULTS;
  if (options === null || typeof options !== 'object') {
    throw typeError(`ratekeeper: acquire options must be an object, got ${describe(options)}`);
  }
  const { signal, maxWaitMs } = options as AcquireOptions;
  return { signal: checkSignal(signal), maxWaitMs: maxWaitMs === undefined ? Infinity : checkMaxWait(maxWaitMs) };
}

/** Returns `signal` if it is undefined or an AbortSignal (any realm's); throws a `TypeError` naming it otherwise. */
export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  const s = signal as Partial<AbortSignal> | null;
  if (s === null || typeof s !== 'object' || typeof s.aborted !== 'boolean' || typeof s.addEventListener !== 'function') {
    throw typeError(`ratekeeper: \`signal\` must be an AbortSignal, got ${describe(signal)}`);
  }
  return signal as AbortSignal;
}

/** Returns `maxWaitMs` if it is a number of at least 0 (`Infinity` included); throws a `TypeError` or `RangeError` naming it otherwise. */
export function checkMaxWait(maxWaitMs: unknown): number {
  assertNumber('maxWaitMs', maxWaitMs);
  if (!(maxWaitMs >= 0)) {
    throw rangeError(`ratekeeper: \`maxWaitMs\` must be a number of at least 0 (Infinity for no limit), got ${maxWaitMs}`);
  }
  return maxWaitMs;
}
