import type { Clock } from '../core/clock';
import { Rule } from '../core/rule';
import { coded, rangeError, typeError } from '../core/errors';
import { describe } from '../core/validate';

// The options every store-backed limiter (Redis, PostgreSQL) reads alike, checked alike.

/**
 * Accepts any object shaped like a Rule and checks it again: the CommonJS build of each entry point
 * carries its own copy of the `Rule` class, so `instanceof` could refuse the user's rule.
 */
export function toRule(rule: unknown): Rule {
  if (rule === null || typeof rule !== 'object') {
    throw typeError(`ratekeeper: \`rule\` must be a Rule, e.g. Rule.perSecond(10), got ${describe(rule)}`);
  }
  const { limit, windowMs } = rule as Rule;
  return new Rule(limit, windowMs);
}

/** Checks `clock`, `timeoutMs` and `onError`, throwing a TypeError or RangeError naming the option. */
export function checkStoreOptions(clock: unknown, timeoutMs: unknown, onError: unknown): asserts clock is Clock | undefined {
  if (clock !== undefined && (clock === null || typeof clock !== 'object' || typeof (clock as Clock).now !== 'function')) {
    throw typeError(`ratekeeper: \`clock\` must be an object with a now() method, got ${describe(clock)}`);
  }
  // setTimeout cannot wait longer than 2^31 - 1 ms; it would fire at once instead.
  if (!(timeoutMs === Infinity || (Number.isInteger(timeoutMs) && (timeoutMs as number) >= 1 && (timeoutMs as number) <= 2 ** 31 - 1))) {
    const message = `\`timeoutMs\` must be an integer from 1 to 2147483647, or Infinity, got ${describe(timeoutMs)}`;
    throw typeof timeoutMs === 'number' ? rangeError(`ratekeeper: ${message}`) : typeError(`ratekeeper: ${message}`);
  }
  if (onError !== undefined && typeof onError !== 'function') {
    throw typeError(`ratekeeper: \`onError\` must be a function, got ${describe(onError)}`);
  }
}

/**
 * Calls the outage hook with an `Error` (a client failing with anything else has it wrapped, as
 * `cause`, in an error naming the `store`), so `error.message` always reads; a failing hook must not turn a policy decision into a
 * failed request.
 */
export function report(onError: ((error: Error, key: string) => void) | undefined, error: unknown, key: string, store = 'Redis'): void {
  try {
    onError?.(error instanceof Error ? error : coded(new Error(`ratekeeper: the ${store} client failed with ${String(error)}`, { cause: error }), 'ERR_RATEKEEPER_STORE_ERROR'), key);
  } catch {
    // Ignored, as documented.
  }
}
