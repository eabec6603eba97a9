import { typeError } from './errors';
import { describe, integerIn } from './validate';

/** `Rule.MAX_WINDOW_MS`, named outside the class for the reason given at `rule` below. */
const MAX_WINDOW_MS = 2 ** 42;

/**
 * How many permits a key may use per window: `limit` per `windowMs` milliseconds.
 * Each algorithm reads it in its own way (see the algorithm guide in the README).
 *
 * `limit` is a safe integer of at least 1 and `windowMs` a whole number of milliseconds from 1 to
 * {@link Rule.MAX_WINDOW_MS} (2^42 ms, about 139 years); anything else throws. Every rule in that
 * domain is decided exactly by every algorithm, in memory and over Redis, however large
 * `limit × windowMs` is.
 *
 * @example
 * ```ts
 * import { Rule } from 'ratekeeper';
 * const rule = new Rule(100, 60_000); // the same as Rule.perMinute(100)
 * rule.limit; // 100
 * ```
 */
export class Rule {
  /** The most permits a key may hold or use per window: a positive safe integer. */
  readonly limit: number;
  /** The window length: a whole number of milliseconds from 1 to `Rule.MAX_WINDOW_MS`. */
  readonly windowMs: number;

  /**
   * The longest window, 2^42 ms (about 139 years). Bounded so that every store can expire a key
   * after two windows (Redis refuses expiries near 2^63 ms) and so that a window's arithmetic,
   * `limit × windowMs` below 2^95, stays within the exact two-part products every algorithm and
   * every Lua script uses. Whole milliseconds because the clock ticks in them: a fractional window
   * buys no precision a caller can see, and made the window-based algorithms inexact.
   */
  static readonly MAX_WINDOW_MS = MAX_WINDOW_MS;

  /**
   * @throws TypeError when `limit` or `windowMs` is not a number; RangeError, naming the value, when
   * `limit` is not a safe integer of at least 1 or `windowMs` not an integer from 1 to `Rule.MAX_WINDOW_MS`.
   */
  constructor(limit: number, windowMs: number) {
    this.limit = integerIn('limit', limit, 1, Number.MAX_SAFE_INTEGER);
    this.windowMs = integerIn('windowMs', windowMs, 1, MAX_WINDOW_MS);
  }

  /** `limit` per second. */
  static perSecond(limit: number): Rule {
    return rule(limit, 1000);
  }

  /** `limit` per minute. */
  static perMinute(limit: number): Rule {
    return rule(limit, 60_000);
  }

  /** `limit` per hour. */
  static perHour(limit: number): Rule {
    return rule(limit, 3_600_000);
  }
}

// Outside the class on purpose: a class that names itself in its own body is bundled as
// `var Rule = class _Rule`, and `Rule.name` would read `_Rule` in logs (test/package checks it).
const rule = (limit: number, windowMs: number) => new Rule(limit, windowMs);

/**
 * Makes a function that derives a value from a rule once per distinct `(limit, windowMs)` and shares
 * it. A keyed limiter builds one algorithm per key, often from a fresh `Rule` each time
 * (`() => new TokenBucket(Rule.perSecond(4))`); sharing what is derived keeps each key's state to a
 * few numbers. The cache is cleared when it grows past 1024 rules, so odd usage cannot leak memory.
 *
 * A rule is read by its fields, never by `instanceof Rule`: a Rule from the other build (ESM and
 * CommonJS in one process) or a plain `{ limit, windowMs }` is checked as `new Rule` checks, and
 * `derive` always gets a Rule of this copy, made from those fields, so no one can change it later.
 */
export function sharedPerRule<T>(derive: (rule: Rule) => T): (rule: Rule) => T {
  const cache = new Map<string, T>();
  // Every new key builds its state through here: the same fields as last time (the common case, a
  // rule made once outside the factory) are answered without building the cache's key. Compared by
  // the fields just read, not by the object: a plain object (or a Rule, writable at run time) may
  // have changed since, and must be checked again, never answered with the rule it held before.
  let lastLimit: unknown = Number.NaN;
  let lastWindowMs: unknown = Number.NaN;
  let lastValue: T | undefined;
  return (rule) => {
    const { limit, windowMs } = (rule ?? {}) as Partial<Rule>;
    if (limit === lastLimit && windowMs === lastWindowMs) return lastValue as T;
    if (typeof limit !== 'number' || typeof windowMs !== 'number') {
      throw typeError(`ratekeeper: \`rule\` must be a Rule (or { limit, windowMs }), e.g. Rule.perSecond(10), got ${describe(rule)}`);
    }
    const id = `${limit}/${windowMs}`;
    let value = cache.get(id);
    if (value === undefined) {
      const checked = new Rule(limit, windowMs);
      if (cache.size >= 1024) cache.clear();
      value = derive(checked);
      cache.set(id, value);
    }
    lastLimit = limit;
    lastWindowMs = windowMs;
    lastValue = value;
    return value;
  };
}

/** The shared instance of a rule, so that per-key state holds a pointer to one object per distinct rule. */
export const canonicalRule = sharedPerRule((rule) => rule);
