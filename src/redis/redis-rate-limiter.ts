import type { Rule } from '../core/rule';
import { typeError } from '../core/errors';
import { checkString, describe } from '../core/validate';
import { ruleFreeNamespace, storeNamespace } from '../store/keys';
import { claimNamespace } from '../store/namespaces';
import { checkName } from '../store/store-options';
import { type RuleOf, type RuleSummary, StoreRateLimiter } from '../store/store-rate-limiter';
import { RedisEngine } from './engine';
import type { RedisRateLimiterOptions } from './options';
import { plans, type RedisAlgorithm } from './scripts';

/**
 * One shared rate limit per key across every server that talks to the same Redis. Each decision is
 * atomic in a Lua script, timed by the server's clock, and decided exactly as the in-memory
 * algorithm of the same name would. A call that finds nothing in flight goes at once; the calls
 * made while a round of script calls is in flight, in whatever tick, go together in the next (on a
 * Redis Cluster, one batch per hash slot), each deciding as if sent alone in the order asked.
 * The methods are the store layer's (StoreRateLimiter), the same as `PostgresRateLimiter`'s.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { Rule } from 'ratekeeper';
 * import { RedisRateLimiter } from 'ratekeeper/redis';
 *
 * const limiter = new RedisRateLimiter({
 *   client: new Redis(),
 *   algorithm: 'token-bucket',
 *   rule: Rule.perSecond(10),
 *   onStoreError: 'allow',
 * });
 * const decision = await limiter.tryAcquire('user-42');
 * if (!decision.allowed) console.log(`retry in ${decision.retryAfterMs} ms`);
 * ```
 */
export class RedisRateLimiter<R extends Rule | RuleOf = Rule> extends StoreRateLimiter<R> {
  /** @throws TypeError or RangeError naming the option, before anything is sent to Redis. */
  constructor(options: RedisRateLimiterOptions<R>) {
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: RedisRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { client, algorithm, rule, onStoreError, prefix = 'ratekeeper:', name, clock, timeoutMs = 500, onError, refusalCache = false, batch = true } = options;
    if (typeof algorithm !== 'string' || !Object.hasOwn(plans, algorithm)) {
      throw typeError(`ratekeeper: \`algorithm\` must be one of ${Object.keys(plans).map((name) => `'${name}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    const engine = new RedisEngine(client, plans[algorithm], clock !== undefined);
    checkString('prefix', prefix);
    checkName(name);
    if (typeof batch !== 'boolean') throw typeError(`ratekeeper: \`batch\` must be true or false, got ${describe(batch)}`);
    super({ algorithm, rule: rule as R, onStoreError, prefix, name, clock, timeoutMs, onError, refusalCache, batch }, engine);
    const fixed = typeof rule === 'function' ? undefined : (this.rule as Rule);
    const namespace = fixed === undefined ? ruleFreeNamespace(prefix, name, algorithm) : storeNamespace(prefix, name, algorithm, fixed);
    claimNamespace(client, namespace, name !== undefined, 'RedisRateLimiter', (message) => console.warn(message));
  }

  /** A summary for logs and `JSON.stringify`: the algorithm, rule (`'per key'` for a function), key prefix, name (when given) and timeout; never the client. */
  override toJSON(): { algorithm: RedisAlgorithm; rule: RuleSummary<R>; prefix: string; name?: string; timeoutMs: number } {
    return super.toJSON() as ReturnType<RedisRateLimiter<R>['toJSON']>;
  }
}
