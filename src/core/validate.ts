import { rangeError, typeError } from './errors';
/** Renders any value for an error message: strings quoted and cut short, everything else as JavaScript prints it. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'symbol' || typeof value === 'function') return String(value);
  if (value !== null && typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}

/** Whether `value` is a thenable (a store's answer on its way, any promise-like): a decision, a reservation or nothing has no `then`. */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as Partial<PromiseLike<unknown>> | null | undefined)?.then === 'function';
}

/** Throws a `TypeError` unless `value` is a number. */
export function assertNumber(name: string, value: unknown): asserts value is number {
  if (typeof value !== 'number') throw typeError(`ratekeeper: \`${name}\` must be a number, got ${describe(value)}`);
}

/** Returns `value` if it is a finite number; throws a `TypeError` or `RangeError` naming it otherwise. */
export function finiteNumber(name: string, value: unknown): number {
  assertNumber(name, value);
  if (!Number.isFinite(value)) throw rangeError(`ratekeeper: \`${name}\` must be a finite number, got ${value}`);
  return value;
}

/** Returns `value` if it is an integer from `min` to `max`; throws a `TypeError` or `RangeError` naming it otherwise. */
export function integerIn(name: string, value: unknown, min: number, max: number): number {
  assertNumber(name, value);
  if (!(Number.isInteger(value) && value >= min && value <= max)) {
    const range = max === Number.MAX_SAFE_INTEGER ? `a safe integer of at least ${min}` : `an integer from ${min} to ${max}`;
    throw rangeError(`ratekeeper: \`${name}\` must be ${range}, got ${value}`);
  }
  return value;
}

/**
 * The hot-path check every algorithm runs on `permits`: cheap when the value is good, a precise error
 * when it is not. A request larger than the whole limit is refused here, since no wait could fix it.
 */
export function checkPermits(permits: number, limit: number): void {
  // Number.isInteger first: comparing a Symbol with >= would throw a TypeError of the engine's own.
  if (!(Number.isInteger(permits) && permits >= 1 && permits <= limit)) integerIn('permits', permits, 1, limit);
}

/** The hot-path check on a clock reading: a NaN or infinite time would poison stored state. */
export function checkTime(nowMs: number): void {
  if (!Number.isFinite(nowMs)) finiteNumber('nowMs', nowMs);
}

/**
 * The check on a reading of a limiter's clock: finite, and within ±(2^53 − 1) ms, past which no
 * decision is exact (a nanosecond clock passed as milliseconds). Algorithms called directly only
 * need `checkTime`: they add waits to readings when they search for a retry time.
 */
export function checkReading(nowMs: number): void {
  if (!(Number.isFinite(nowMs) && Math.abs(nowMs) <= Number.MAX_SAFE_INTEGER)) {
    finiteNumber('nowMs', nowMs);
    throw rangeError(`ratekeeper: \`nowMs\` must be a reading in milliseconds from -(2^53 - 1) to 2^53 - 1, got ${nowMs}`);
  }
}

/** In a `u` regex a surrogate pair is one code point, so `\p{Cs}` matches only a lone surrogate. */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Throws a `TypeError` naming the value unless `value` is a string of well-formed UTF-16. A lone
 * surrogate has no UTF-8 form: a store that sends keys as UTF-8 (Redis) would write U+FFFD for it,
 * so `'a\uD800'` and `'a\uDBFF'` would share one count there while staying apart in memory. Keys
 * are refused alike everywhere, so no two stores disagree about which keys are one.
 */
export function checkString(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string') throw typeError(`ratekeeper: \`${name}\` must be a string, got ${describe(value)}`);
  if (LONE_SURROGATE.test(value)) throw typeError(`ratekeeper: \`${name}\` must be well-formed UTF-16 (no lone surrogate), got ${describe(value)}`);
}
