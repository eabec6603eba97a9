import type { Concurrency } from '../algorithms/concurrency';
import type { Rule } from '../core/rule';
import { typeError } from '../core/errors';
import { checkString, describe } from '../core/validate';
import { ruleFreeNamespace } from '../store/keys';
import { claimNamespace } from '../store/namespaces';
import { checkName } from '../store/store-options';
import { type RuleOf, type RuleSummary, StoreRateLimiter } from '../store/store-rate-limiter';
import { toScriptClient } from './client';
import { RedisEngine } from './engine';
import type { RedisInFlightOptions, RedisRateLimiterOptions } from './options';
import { leasePlan, plans, type RedisAlgorithm } from './scripts';

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
  constructor(options: RedisRateLimiterOptions<R> | RedisInFlightOptions) {
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: RedisRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { client, algorithm, rule, concurrency, onStoreError, prefix = 'ratekeeper:', name, clock, timeoutMs = 500, onError, refusalCache = false, batch = true } = options;
    // An in-flight limit alone has neither; otherwise the algorithm is checked here, the rule by the layer.
    const alone = concurrency !== undefined && algorithm === undefined && rule === undefined;
    if (!alone && (typeof algorithm !== 'string' || !Object.hasOwn(plans, algorithm))) {
      throw typeError(`ratekeeper: \`algorithm\` must be one of ${Object.keys(plans).map((name) => `'${name}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    // The client is checked first, then the prefix and name its keys are named by.
    const scriptClient = toScriptClient(client);
    checkString('prefix', prefix);
    checkName(name);
    const namespace = ruleFreeNamespace(prefix, name, algorithm ?? 'concurrency');
    const plan = concurrency === undefined ? plans[algorithm!] : leasePlan(algorithm);
    const engine = new RedisEngine(client, scriptClient, plan, clock !== undefined, namespace);
    if (typeof batch !== 'boolean') throw typeError(`ratekeeper: \`batch\` must be true or false, got ${describe(batch)}`);
    super({ algorithm, rule: rule as R, concurrency, onStoreError, prefix, name, clock, timeoutMs, onError, refusalCache, batch }, engine);
    // Keys name no rule (the state records it), so limiters with different rules share them.
    claimNamespace(client, namespace, name !== undefined, 'RedisRateLimiter', (message) => console.warn(message));
  }

  /**
   * A summary for logs and `JSON.stringify`: the algorithm (`'concurrency'` for an in-flight limit
   * alone), rule (`'per key'` for a function), key prefix, name (when given), timeout and the
   * in-flight limit (when given); never the client.
   */
  override toJSON(): { algorithm: RedisAlgorithm | 'concurrency'; rule: RuleSummary<R>; prefix: string; name?: string; timeoutMs: number; concurrency?: Concurrency } {
    return super.toJSON() as ReturnType<RedisRateLimiter<R>['toJSON']>;
  }
}
