import { scaledUnits } from '../algorithms/token-bucket';
import { expirySlackMs as slack } from '../store/constants';
import type { Rule } from '../core/rule';
import type { StoreAlgorithm } from '../store/engine';

/**
 * The algorithms `PostgresRateLimiter` runs, named as over Redis and in memory: `'token-bucket'`
 * is `TokenBucket`, and so on.
 *
 * @example
 * ```ts
 * import type { PostgresAlgorithm } from 'ratekeeper/postgres';
 * const algorithm: PostgresAlgorithm = 'sliding-window-counter';
 * ```
 */
export type PostgresAlgorithm = StoreAlgorithm;

/** One algorithm in SQL: the name `ratekeeper_decide` dispatches on, and the rule's numbers its codec reads. */
export interface SqlPlan {
  readonly codec: 'token-bucket' | 'fixed-window' | 'sliding-window-log' | 'sliding-window-counter';
  readonly ruleArgs: (rule: Rule) => number[];
}

const tokenBucket: SqlPlan = {
  codec: 'token-bucket',
  // The in-memory bucket's own scaled units, so both decide alike; capacity is limit × perToken.
  ruleArgs: (rule) => {
    const { perMs, perToken } = scaledUnits(rule);
    return [rule.limit, perMs, perToken];
  },
};

const windowed = (codec: SqlPlan['codec']): SqlPlan => ({ codec, ruleArgs: ({ limit, windowMs }) => [limit, windowMs] });

/**
 * How long a row outlives the moment its key is as new, in ms: a quarter of the window, at most a
 * minute, as Redis keys do. Expiries run on the server's clock while a caller's `clock` may stand
 * still or lag it; without this margin a row could vanish while, by the caller's clock, its key
 * still counted something (forgiving it). The limiter passes it as the last of the rule's numbers.
 */
export const expirySlackMs = ({ windowMs }: Rule): number => slack(windowMs);

/** The plan for each algorithm name. */
export const sqlPlans: Readonly<Record<PostgresAlgorithm, SqlPlan>> = {
  'token-bucket': tokenBucket,
  'leaky-bucket': tokenBucket,
  'fixed-window': windowed('fixed-window'),
  'sliding-window-log': windowed('sliding-window-log'),
  'sliding-window-counter': windowed('sliding-window-counter'),
};
