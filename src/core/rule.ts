import { rangeError, typeError } from './errors';
import { assertNumber, describe, integerIn } from './validate';

/**
 * How many permits a key may use per window: `limit` per `windowMs` milliseconds.
 * Each algorithm reads it in its own way (see the algorithm guide in the README).
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
  /** The window length in milliseconds: a positive finite number. */
  readonly windowMs: number;

  constructor(limit: number, windowMs: number) {
    this.limit = integerIn('limit', limit, 1, Number.MAX_SAFE_INTEGER);
    assertNumber('windowMs', windowMs);
    if (!(windowMs > 0 && windowMs < Infinity)) {
      throw rangeError(`ratekeeper: \`windowMs\` must be a positive finite number, got ${windowMs}`);
    }
    this.windowMs = windowMs;
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
  // Every new key builds its state through here: the same Rule object as last time (the common
  // case, a rule made once outside the factory) is answered without building the cache's key.
  let lastRule: Rule | undefined;
  let lastValue: T | undefined;
  return (rule) => {
    if (rule === lastRule) return lastValue as T;
    const { limit, windowMs } = (rule ?? {}) as Partial<Rule>;
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
    lastRule = rule;
    lastValue = value;
    return value;
  };
}

/** The shared instance of a rule, so that per-key state holds a pointer to one object per distinct rule. */
export const canonicalRule = sharedPerRule((rule) => rule);
