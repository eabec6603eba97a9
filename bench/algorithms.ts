import {
  FixedWindow,
  LeakyBucket,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  type RateLimitAlgorithm,
} from '../src/index';

/** The algorithms as the Redis options spell them; the in-memory classes are looked up by the same names. */
export const ALGORITHM_NAMES = ['token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter'] as const;
export type AlgorithmName = (typeof ALGORITHM_NAMES)[number];

export const ALGORITHMS: Record<AlgorithmName, (rule: Rule) => RateLimitAlgorithm> = {
  'token-bucket': (rule) => new TokenBucket(rule),
  'leaky-bucket': (rule) => new LeakyBucket(rule),
  'fixed-window': (rule) => new FixedWindow(rule),
  'sliding-window-log': (rule) => new SlidingWindowLog(rule),
  'sliding-window-counter': (rule) => new SlidingWindowCounter(rule),
};

export function isAlgorithmName(value: unknown): value is AlgorithmName {
  return typeof value === 'string' && (ALGORITHM_NAMES as readonly string[]).includes(value);
}

/**
 * The hot-key rule: 10^9 per second, so no decision at benchmark rates is ever refused (the common
 * case on a hot path).
 */
export const HOT_RULE = new Rule(1_000_000_000, 1000);

/**
 * The many-keys rule: 3600 per hour (one per second, bursts of 3600). Each key is revisited every
 * 10 to 200 ms and a few dozen times per contender, so no decision is refused and no key's state
 * becomes idle: all 100 000 keys stay resident, as active users do.
 */
export const MANY_RULE = Rule.perHour(3600);

/**
 * The sliding log stores every hit of its window, so under the rules above its logs would grow with
 * every hit of the run (to ~10^7 timestamps for the hot key). It gets the same rates over shorter
 * windows instead, so that a log holds what a log is meant to hold: about 10 000 hits for the hot
 * key (10^6 per ms), about 16 hits per key with 100 000 keys (1000 per second; keys are revisited
 * every 10 to 200 ms, so none is idle or refused).
 */
export const LOG_HOT_RULE = new Rule(1_000_000, 1);
export const LOG_MANY_RULE = Rule.perSecond(1000);

/** The rule each algorithm gets in each scenario. */
export function ruleFor(algorithm: AlgorithmName, hot: boolean): Rule {
  if (algorithm === 'sliding-window-log') return hot ? LOG_HOT_RULE : LOG_MANY_RULE;
  return hot ? HOT_RULE : MANY_RULE;
}

/** The current time as `systemClock` reads it, for a ManualClock that must hold realistic (non-Smi) values. */
export function epochNowMs(): number {
  return Math.floor(performance.timeOrigin + performance.now());
}
