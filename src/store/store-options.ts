import { type Concurrency, MAX_LEASE_MS } from '../algorithms/concurrency';
import type { Clock } from '../core/clock';
import { Rule } from '../core/rule';
import { coded, rangeError, typeError } from '../core/errors';
import { checkString, describe, integerIn } from '../core/validate';
import { type InFlightLimit, MAX_IN_FLIGHT } from './engine';
import { RefusalCache } from './refusal-cache';

// The options every store-backed limiter (Redis, PostgreSQL) reads alike, checked alike.

/**
 * Accepts any object shaped like a Rule and checks it again: the CommonJS build of each entry point
 * carries its own copy of the `Rule` class, so `instanceof` could refuse the user's rule.
 */
export function toRule(rule: unknown): Rule {
  if (rule === null || typeof rule !== 'object') {
    throw typeError(`ratekeeper: \`rule\` must be a Rule, e.g. Rule.perSecond(10), or a function of the key, got ${describe(rule)}`);
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
export function report(onError: ((error: Error, key: string) => void) | undefined, error: unknown, key: string, store: string): void {
  try {
    onError?.(error instanceof Error ? error : coded(new Error(`ratekeeper: the ${store} client failed with ${String(error)}`, { cause: error }), 'ERR_RATEKEEPER_STORE_ERROR'), key);
  } catch {
    // Ignored, as documented.
  }
}

/** Checks a limiter's `name`: undefined, or a non-empty string of well-formed UTF-16. */
export function checkName(name: unknown): asserts name is string | undefined {
  if (name === undefined) return;
  checkString('name', name);
  if (name === '') throw typeError('ratekeeper: `name` must be a non-empty string, got ""');
}

/** The refusal cache's bounds when `true` (or an object) leaves them out. */
const REFUSAL_CACHE_KEYS = 10_000;
const REFUSAL_CACHE_MS = 1000;

/** The refusal cache `option` asks for (`false`: none), checked. */
export function refusalCacheFor(option: unknown): RefusalCache | undefined {
  if (option === false) return undefined;
  if (option === true) return new RefusalCache(REFUSAL_CACHE_KEYS, REFUSAL_CACHE_MS);
  if (option !== null && typeof option === 'object' && !Array.isArray(option)) {
    const { maxKeys = REFUSAL_CACHE_KEYS, maxMs = REFUSAL_CACHE_MS } = option as { maxKeys?: unknown; maxMs?: unknown };
    return new RefusalCache(integerIn('refusalCache.maxKeys', maxKeys, 1, Number.MAX_SAFE_INTEGER), integerIn('refusalCache.maxMs', maxMs, 1, Number.MAX_SAFE_INTEGER));
  }
  throw typeError(`ratekeeper: \`refusalCache\` must be true, false or { maxKeys?, maxMs? }, got ${describe(option)}`);
}

/**
 * Checks the `concurrency` option: undefined, or a `Concurrency` (read by shape, as a `Rule` is:
 * each build of ratekeeper has its own class) whose lease a store can keep and whose leases a key
 * can hold. Returns the in-flight limit every call carries.
 * @throws TypeError naming the value when it is no `Concurrency`; RangeError for `leaseMs:
 * Infinity` (a store keeps a lease's end) or a `limit` above {@link MAX_IN_FLIGHT}.
 */
export function checkConcurrency(concurrency: unknown): InFlightLimit | undefined {
  if (concurrency === undefined) return undefined;
  const c = concurrency as Partial<Concurrency> | null;
  if (c === null || typeof c !== 'object' || typeof c.release !== 'function' || typeof c.extend !== 'function' || typeof c.limit !== 'number' || typeof c.leaseMs !== 'number') {
    throw typeError(`ratekeeper: \`concurrency\` must be a Concurrency, e.g. new Concurrency(2, { leaseMs: 30_000 }), got ${describe(concurrency)}`);
  }
  if (c.leaseMs === Infinity) {
    throw rangeError('ratekeeper: `concurrency.leaseMs` must be a whole number of ms from 1 to 4398046511104 over a store, which keeps each lease\'s end, got Infinity');
  }
  return { limit: integerIn('concurrency.limit', c.limit, 1, MAX_IN_FLIGHT), leaseMs: integerIn('concurrency.leaseMs', c.leaseMs, 1, MAX_LEASE_MS) };
}
