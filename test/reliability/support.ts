import { expect } from 'vitest';
import { Composite, KeyedRateLimiter, ManualScheduler, Rule, SlidingWindowLog, TokenBucket } from '../../src/index';

/**
 * The values every field is tried with: wrong types, NaN, ±Infinity, negative, zero, fractional,
 * huge, missing. A few are valid for some fields (2, '1', true, undefined), so the table also shows
 * that a check does not refuse what it should take.
 */
export const VALUES: readonly unknown[] = [
  Number.NaN,
  Infinity,
  -Infinity,
  -1,
  0,
  -0,
  0.5,
  1.5,
  2,
  2 ** 31,
  2 ** 53,
  1e308,
  Number.MIN_VALUE,
  '1',
  '',
  'x'.repeat(1 << 20),
  null,
  undefined,
  {},
  [],
  [1],
  true,
  1n,
  Symbol('bad'),
  new Date(0),
  Object.create(null),
];

/** Shows a value in a test name. */
export function show(value: unknown): string {
  if (typeof value === 'string') return value.length > 12 ? `a ${value.length}-char string` : JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'symbol') return 'a symbol';
  if (Object.is(value, -0)) return '-0';
  if (value instanceof Date) return 'a Date';
  if (Array.isArray(value)) return `[${value.map(show).join(', ')}]`;
  if (value !== null && typeof value === 'object') return Object.getPrototypeOf(value) === null ? 'a null-prototype object' : '{}';
  return String(value);
}

export const isString = (v: unknown): boolean => typeof v === 'string';
export const isFiniteNumber = (v: unknown): boolean => typeof v === 'number' && Number.isFinite(v);
/** A clock reading the algorithms accept: a number within ±(2^53 − 1) ms, past which no decision is exact. */
export const isReading = (v: unknown): boolean => isFiniteNumber(v) && Math.abs(v as number) <= Number.MAX_SAFE_INTEGER;
export const isIntegerIn = (min: number, max: number) => (v: unknown): boolean => Number.isInteger(v) && (v as number) >= min && (v as number) <= max;
export const isObject = (v: unknown): boolean => v !== null && typeof v === 'object';
export const optional = (accepts: (v: unknown) => boolean) => (v: unknown): boolean => v === undefined || accepts(v);
export const never = (): boolean => false;

/**
 * The error `call` throws, or the promise it returns rejects with at once (before the next
 * macrotask); undefined when neither. An accepted call may wait its turn, and is not waited for.
 */
export async function errorOf(call: () => unknown): Promise<unknown> {
  try {
    const result = call();
    if (result instanceof Promise) {
      result.catch(() => {});
      await Promise.race([result, new Promise((resolve) => setTimeout(resolve, 0))]);
    }
    return undefined;
  } catch (error) {
    return error;
  }
}

/**
 * Runs `call` and checks the outcome: when `accepted`, it must not throw (nor reject); otherwise it
 * must throw (or reject with) a TypeError or RangeError whose message starts with `ratekeeper: `
 * and names `field`. Returns the error, if any.
 */
export async function expectOutcome(call: () => unknown, accepted: boolean, field: string | readonly string[]): Promise<unknown> {
  const error = await errorOf(call);
  if (accepted) {
    expect(error).toBeUndefined();
    return undefined;
  }
  expect(error, `expected a refusal naming ${field}`).toBeDefined();
  expectNamedRefusal(error, typeof field === 'string' ? [field] : field);
  return error;
}

/**
 * The checks on a refusal: a TypeError or RangeError from ratekeeper whose message names one of
 * `fields` (or an entry of one, as `` `limiter[0]` `` names an entry of `` `limiter` ``), with the
 * stable `code` of its kind (what code that must work across copies branches on).
 */
export function expectNamedRefusal(error: unknown, fields: readonly string[]): void {
  expect(error instanceof TypeError || error instanceof RangeError, String(error)).toBe(true);
  const { message, code } = error as Error & { code?: unknown };
  expect(code, message).toBe(error instanceof RangeError ? 'ERR_RATEKEEPER_OUT_OF_RANGE' : 'ERR_RATEKEEPER_INVALID_ARGUMENT');
  expect(message.startsWith('ratekeeper: '), message).toBe(true);
  expect(
    fields.some((field) => message.includes(field) || message.includes(field.replace(/`$/, '['))),
    `${message} names none of ${fields.join(', ')}`,
  ).toBe(true);
}

/**
 * A limiter and its twin on one ManualScheduler, both with the same history: key 'a' has 1 of 3
 * left, 'b' none, and 'c' holds a composite of 3 per second and 5 per ten seconds. `same()` moves
 * time on and checks that every key decides exactly as in the twin, and that both hold the same
 * keys: a bad call on `limiter` must have written nothing.
 */
export function twins(maxKeys = 16) {
  const scheduler = new ManualScheduler(1_000);
  const factory = (key: string) =>
    key.startsWith('c') ? new Composite([new TokenBucket(new Rule(3, 1000)), new SlidingWindowLog(new Rule(5, 10_000))]) : new TokenBucket(new Rule(3, 1000));
  const make = () => new KeyedRateLimiter({ algorithm: factory, clock: scheduler, maxKeys });
  const limiter = make();
  const twin = make();
  for (const l of [limiter, twin]) {
    l.tryAcquire('a', 2);
    l.tryAcquire('b', 3);
    l.tryAcquire('c', 2);
  }
  const same = async () => {
    expect(limiter.size).toBe(twin.size);
    for (const dt of [0, 1, 332, 333, 1000]) {
      await scheduler.advanceAsync(dt);
      for (const key of ['a', 'b', 'c', 'fresh']) expect(limiter.tryAcquire(key)).toStrictEqual(twin.tryAcquire(key));
    }
  };
  return { scheduler, limiter, twin, same };
}
