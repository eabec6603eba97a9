import { scaledUnits } from '../algorithms/token-bucket';
import type { Rule } from '../core/rule';
import { batchScript } from './lua/batch';
import { FIXED_WINDOW, FIXED_WINDOW_OPERATIONS } from './lua/fixed-window';
import { SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_COUNTER_OPERATIONS } from './lua/sliding-window-counter';
import { SLIDING_WINDOW_LOG, SLIDING_WINDOW_LOG_OPERATIONS } from './lua/sliding-window-log';
import { TOKEN_BUCKET, TOKEN_BUCKET_OPERATIONS } from './lua/token-bucket';
import { sha1 } from './sha1';

/**
 * The algorithms `RedisRateLimiter` runs, named as in memory: `'token-bucket'` is `TokenBucket`,
 * and so on. Each decides exactly as its in-memory twin given the same clock readings.
 *
 * @example
 * ```ts
 * import type { RedisAlgorithm } from 'ratekeeper/redis';
 * const algorithm: RedisAlgorithm = 'sliding-window-log';
 * ```
 */
export type RedisAlgorithm = 'token-bucket' | 'leaky-bucket' | 'fixed-window' | 'sliding-window-log' | 'sliding-window-counter';

/** A Lua script and the SHA-1 that EVALSHA names it by. */
export interface LuaScript {
  readonly source: string;
  readonly sha1: string;
}

/** One algorithm over Redis: its script and the rule's numbers, as ARGV[1...], in the script's order. */
export interface ScriptPlan {
  readonly script: LuaScript;
  readonly ruleArgs: (rule: Rule) => string[];
}

/**
 * Hashed when first sent, not when the module loads: hashing every algorithm's script in code not
 * yet optimized took most of the CPU of importing `ratekeeper/redis` (bench/HISTORY.md), a cost
 * every cold start paid for scripts most applications never run.
 */
function script(algorithm: string, operations: string, ruleArgs: number): LuaScript {
  const source = batchScript(algorithm, operations, ruleArgs);
  let digest: string | undefined;
  return {
    source,
    get sha1() {
      return (digest ??= sha1(source));
    },
  };
}

const tokenBucket: ScriptPlan = {
  script: script(TOKEN_BUCKET, TOKEN_BUCKET_OPERATIONS, 3),
  // The in-memory bucket's own scaled units, so both decide alike.
  ruleArgs: (rule) => {
    const { perMs, perToken, limit } = scaledUnits(rule);
    return [String(perMs), String(perToken), String(limit)];
  },
};

function windowed(source: string, operations: string): ScriptPlan {
  return { script: script(source, operations, 2), ruleArgs: ({ limit, windowMs }) => [String(limit), String(windowMs)] };
}

/** The plan for each algorithm name. */
export const plans: Readonly<Record<RedisAlgorithm, ScriptPlan>> = {
  'token-bucket': tokenBucket,
  'leaky-bucket': tokenBucket,
  'fixed-window': windowed(FIXED_WINDOW, FIXED_WINDOW_OPERATIONS),
  'sliding-window-log': windowed(SLIDING_WINDOW_LOG, SLIDING_WINDOW_LOG_OPERATIONS),
  'sliding-window-counter': windowed(SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_COUNTER_OPERATIONS),
};
