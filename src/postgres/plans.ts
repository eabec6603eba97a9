import { scaledUnits } from '../algorithms/token-bucket';
import type { Rule } from '../core/rule';
import type { RedisAlgorithm } from '../redis/scripts';

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
export type PostgresAlgorithm = RedisAlgorithm;

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

/** The plan for each algorithm name. */
export const sqlPlans: Readonly<Record<PostgresAlgorithm, SqlPlan>> = {
  'token-bucket': tokenBucket,
  'leaky-bucket': tokenBucket,
  'fixed-window': windowed('fixed-window'),
  'sliding-window-log': windowed('sliding-window-log'),
  'sliding-window-counter': windowed('sliding-window-counter'),
};
