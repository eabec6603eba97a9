import type { Concurrency } from '../algorithms/concurrency';
import { typeError } from '../core/errors';
import type { Rule } from '../core/rule';
import { checkString, describe } from '../core/validate';
import { ruleFreeNamespace } from '../store/keys';
import { claimNamespace } from '../store/namespaces';
import { checkName } from '../store/store-options';
import { type RuleOf, type RuleSummary, StoreRateLimiter } from '../store/store-rate-limiter';
import { toQuery } from './client';
import { PostgresEngine } from './engine';
import { quotedSchema } from './migrate';
import type { PostgresInFlightOptions, PostgresRateLimiterOptions } from './options';
import { codecs, type PostgresAlgorithm } from './plans';
import { rowKeyHeads } from './protocol';

/**
 * One shared rate limit per key across every server that talks to the same PostgreSQL database,
 * for when it is the only shared store you run. Each decision locks its key's row, reads the
 * database server's clock and decides in one function call, exactly as the in-memory algorithm of
 * the same name would; a refusal writes nothing. The decisions asked for in one tick travel in one
 * round trip, each deciding as if sent alone in the order asked. Run {@link migrate} first. The
 * methods are the store layer's (StoreRateLimiter), the same as `RedisRateLimiter`'s. With
 * `concurrency` the key's row also holds its in-flight leases, decided under the same row lock.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { Rule } from 'ratekeeper';
 * import { migrate, PostgresRateLimiter } from 'ratekeeper/postgres';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool);
 * const limiter = new PostgresRateLimiter({ client: pool, algorithm: 'token-bucket', rule: Rule.perSecond(10), onStoreError: 'allow' });
 * const decision = await limiter.tryAcquire('user-42');
 * if (!decision.allowed) console.log(`retry in ${decision.retryAfterMs} ms`);
 * ```
 */
export class PostgresRateLimiter<R extends Rule | RuleOf = Rule> extends StoreRateLimiter<R> {
  readonly #schema: string;

  /** @throws TypeError or RangeError naming the option, before anything is sent to PostgreSQL. */
  constructor(options: PostgresRateLimiterOptions<R> | PostgresInFlightOptions) {
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: PostgresRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { client, algorithm, rule, concurrency, onStoreError, schema, prefix = 'ratekeeper:', name, clock, timeoutMs = 500, onError, refusalCache = false } = options;
    // An in-flight limit alone has neither; otherwise the algorithm is checked here, the rule by the layer.
    const alone = concurrency !== undefined && algorithm === undefined && rule === undefined;
    if (!alone && (typeof algorithm !== 'string' || !Object.hasOwn(codecs, algorithm))) {
      throw typeError(`ratekeeper: \`algorithm\` must be one of ${Object.keys(codecs).map((name) => `'${name}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    const query = toQuery(client);
    checkString('prefix', prefix);
    if (prefix.includes('\u0000')) throw typeError(`ratekeeper: \`prefix\` must be a string without U+0000, got ${describe(prefix)}`);
    checkName(name);
    if (name?.includes('\u0000')) throw typeError(`ratekeeper: \`name\` must be a string without U+0000, got ${describe(name)}`);
    const engine = new PostgresEngine(query, algorithm, rowKeyHeads(prefix, algorithm ?? 'concurrency', name), schema, timeoutMs);
    super({ algorithm, rule: rule as R, concurrency, onStoreError, prefix, name, clock, timeoutMs, onError, refusalCache, batch: true }, engine);
    this.#schema = schema ?? 'ratekeeper';
    // Keys meet only in one schema's table, and a row key holds no rule: limiters with different
    // rules on one prefix share each key's usage unless named apart.
    claimNamespace(client, `${quotedSchema(schema)}.${ruleFreeNamespace(prefix, name, algorithm ?? 'concurrency')}`, name !== undefined, 'PostgresRateLimiter', (message) => console.warn(message));
  }

  /**
   * A summary for logs and `JSON.stringify`: the algorithm (`'concurrency'` for an in-flight limit
   * alone), rule (`'per key'` for a function), schema, key prefix, name (when given), timeout and
   * in-flight limit (when given); never the client.
   */
  override toJSON(): { algorithm: PostgresAlgorithm | 'concurrency'; rule: RuleSummary<R>; schema: string; prefix: string; name?: string; timeoutMs: number; concurrency?: Concurrency } {
    return { ...(super.toJSON() as Omit<ReturnType<PostgresRateLimiter<R>['toJSON']>, 'schema'>), schema: this.#schema };
  }
}
