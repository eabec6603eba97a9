import type { Rule } from '../core/rule';
import { BUCKET } from './lua/bucket';
import { FIXED_WINDOW } from './lua/fixed-window';
import { withConstants } from './lua/prelude';
import { IN_FLIGHT_ALONE } from './lua/in-flight';
import { stringScript, type StringCodec } from './lua/shell';
import { SLIDING_WINDOW_COUNTER } from './lua/sliding-window-counter';
import { leasedSlidingWindowLog, SLIDING_WINDOW_LOG } from './lua/sliding-window-log';
import { batchArguments } from './protocol';
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

/**
 * Hashed when first sent, not when the module loads: hashing every algorithm's script in code not
 * yet optimized took most of the CPU of importing `ratekeeper/redis` (bench/HISTORY.md), a cost
 * every cold start paid for scripts most applications never run.
 */
export function script(source: string): LuaScript {
  let digest: string | undefined;
  return {
    source,
    get sha1() {
      return (digest ??= sha1(source));
    },
  };
}

/**
 * One algorithm over Redis: its script, and the ARGV of a batch of decisions on keys of one rule
 * (the permits left out, all 1, and no look for the previous version's keys), for a script sent
 * bare (bench/redis.ts).
 */
export interface ScriptPlan {
  readonly script: LuaScript;
  readonly ruleArgs: (rule: Rule) => string[];
  /** How {@link PREVIOUS_KEY} reads what the previous version stored: a string, or the log's sorted set. */
  readonly previous: 'GET' | 'ZRANGE';
}

function plan(source: string, previous: ScriptPlan['previous'] = 'GET'): ScriptPlan {
  return { script: script(withConstants(source)), ruleArgs: (rule) => batchArguments([{ key: '', amount: 1, now: undefined, rule }], '', 0, false).args, previous };
}

/**
 * On a cluster, the previous version's key (another slot than the key's): ARGV[1] `GET` reads a
 * string as hex (a reply's bytes would not survive the clients' decoding as text, nor ARGV's
 * encoding), `ZRANGE` a sorted set as its members and scores, space-separated; either replies that
 * and the key's PTTL (-2 for no key), and fails as the standalone script would for a key of
 * another type (WRONGTYPE). `DEL` deletes it once adopted.
 */
export const PREVIOUS_KEY = script(`
local key = KEYS[1]
if ARGV[1] == 'DEL' then return redis.call('DEL', key) end
local value
if ARGV[1] == 'ZRANGE' then
  value = table.concat(redis.call('ZRANGE', key, 0, -1, 'WITHSCORES'), ' ')
else
  value = redis.call('GET', key)
  value = value and string.gsub(value, '.', function(c) return string.format('%02x', string.byte(c)) end) or ''
end
return { value, redis.call('PTTL', key) }
`);

const bucket = plan(stringScript(BUCKET));

/** The plan of each algorithm (the leaky bucket decides as the token bucket does, so it runs the same script). */
export const plans: Readonly<Record<RedisAlgorithm, ScriptPlan>> = {
  'token-bucket': bucket,
  'leaky-bucket': bucket,
  'fixed-window': plan(stringScript(FIXED_WINDOW)),
  'sliding-window-log': plan(SLIDING_WINDOW_LOG, 'ZRANGE'),
  'sliding-window-counter': plan(stringScript(SLIDING_WINDOW_COUNTER)),
};

/** The codec each algorithm's leased script is made from (the sliding-window log has a script of its own). */
const LEASED: Readonly<Record<Exclude<RedisAlgorithm, 'sliding-window-log'>, StringCodec>> = {
  'token-bucket': BUCKET,
  'leaky-bucket': BUCKET,
  'fixed-window': FIXED_WINDOW,
  'sliding-window-counter': SLIDING_WINDOW_COUNTER,
};

/** Leased plans, made on first need: a limiter without `concurrency` never builds them. */
const leased = new Map<StringCodec | 'sliding-window-log', ScriptPlan>();

/**
 * The plan of a limiter with an in-flight limit: its algorithm's script with leases (see the
 * shell, and the log's own), or without an algorithm the in-flight limit alone.
 */
export function leasePlan(algorithm: RedisAlgorithm | undefined): ScriptPlan {
  const codec = algorithm === undefined ? IN_FLIGHT_ALONE : algorithm === 'sliding-window-log' ? algorithm : LEASED[algorithm];
  let made = leased.get(codec);
  if (made === undefined) leased.set(codec, (made = codec === 'sliding-window-log' ? plan(leasedSlidingWindowLog(), 'ZRANGE') : plan(stringScript(codec, true))));
  return made;
}
