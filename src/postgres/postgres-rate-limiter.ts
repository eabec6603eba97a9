import type { Clock } from '../core/clock';
import type { Decision } from '../core/decision';
import { rangeError, typeError } from '../core/errors';
import type { Rule } from '../core/rule';
import { Closable } from '../core/symbols';
import { checkPermits, describe } from '../core/validate';
import type { AcquireOptions } from '../limiter/acquire-options';
import type { AsyncRateLimiter } from '../limiter/keyed-rate-limiter';
import { schedulerFor, systemScheduler } from '../limiter/scheduler';
import { WaitQueue } from '../limiter/wait-queue';
import { Coalescer } from '../redis/coalescer';
import { outagePolicy } from '../redis/outage-policy';
import { checkReply, toDecision } from '../redis/reply';
import { checkStoreOptions, report, toRule } from '../redis/store-options';
import { type Deadline, Timeouts } from '../redis/timeout';
import { type Query, toQuery } from './client';
import { type Batch, KeyOrder } from './key-order';
import { quotedSchema } from './migrate';
import type { PostgresRateLimiterOptions } from './options';
import { expirySlackMs, type PostgresAlgorithm, sqlPlans } from './plans';
import { manyKeysFunction, oneKeyFunction } from './sql/one-key';
import { PostgresTimeoutError } from './timeout-error';

/**
 * The most decisions one round trip carries. Their rows stay locked until the statement ends, and
 * a pool runs several batches side by side on its connections (one backend each), so batches are
 * kept short: with a pool of 8 and 32 calls in flight, 4 gave 1.5× the decisions/s of 32 (measured
 * in bench/stores.ts).
 */
const MAX_BATCH = 4;

/** One decision on its way to PostgreSQL. */
interface Call {
  readonly key: string;
  readonly rowKey: string;
  readonly permits: number;
  /** The caller's clock reading, or undefined when the server's clock decides. */
  readonly now: number | undefined;
  readonly resolve: (decision: Decision | Promise<Decision>) => void;
  /** Never set: a call's deadline starts with its batch, which is sent as soon as it is made. */
  readonly answered: false;
}

/** The calls of one round trip, with their deadline. */
interface CallBatch extends Batch {
  readonly calls: Call[];
  deadline?: Deadline;
}

/**
 * One shared rate limit per key across every server that talks to the same PostgreSQL database,
 * for when it is the only shared store you run. Each decision locks its key's row, reads the
 * database server's clock and decides in one function call, exactly as the in-memory algorithm of
 * the same name would; a refusal writes nothing. The decisions asked for in one tick travel in one
 * round trip, each deciding as if sent alone in the order asked. Run {@link migrate} first.
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
export class PostgresRateLimiter extends Closable implements AsyncRateLimiter {
  /** The rule every key is limited by. */
  readonly rule: Rule;
  readonly #query: Query;
  readonly #statement: string;
  readonly #oneKeyStatement: string;
  readonly #ruleArgs: string;
  readonly #algorithm: PostgresAlgorithm;
  readonly #schema: string;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #keyPrefix: string;
  readonly #clock: Clock | undefined;
  readonly #timeouts: Timeouts;
  readonly #fallback: (error: unknown, call: Call) => Decision | Promise<Decision>;
  readonly #coalescer: Coalescer<Call>;
  readonly #order: KeyOrder<CallBatch>;
  readonly #waiting: WaitQueue;

  /** @throws TypeError or RangeError naming the option, before anything is sent to PostgreSQL. */
  constructor(options: PostgresRateLimiterOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: PostgresRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { client, algorithm, rule, onStoreError, schema, prefix = 'ratekeeper:', clock, timeoutMs = 500, onError } = options;
    if (typeof algorithm !== 'string' || !Object.hasOwn(sqlPlans, algorithm)) {
      throw typeError(`ratekeeper: \`algorithm\` must be one of ${Object.keys(sqlPlans).map((name) => `'${name}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    this.rule = toRule(rule);
    this.#query = toQuery(client);
    const plan = sqlPlans[algorithm];
    const policy = outagePolicy(onStoreError, { rule: this.rule, timeoutMs, report: (error, key) => report(onError, error, key) });
    this.#statement = `SELECT ${quotedSchema(schema)}.${manyKeysFunction(plan.codec)}($1::text[], $2::numeric[], $3::numeric[], $4::numeric[]) AS r`;
    this.#oneKeyStatement = `SELECT ${quotedSchema(schema)}.${oneKeyFunction(plan.codec)}($1::text, $2::numeric, $3::numeric, $4::numeric[]) AS r`;
    if (typeof prefix !== 'string') throw typeError(`ratekeeper: \`prefix\` must be a string, got ${describe(prefix)}`);
    this.#algorithm = algorithm;
    this.#schema = schema ?? 'ratekeeper';
    this.#prefix = prefix;
    this.#keyPrefix = `${prefix}${algorithm}:${this.rule.limit}/${this.rule.windowMs}:`;
    checkStoreOptions(clock, timeoutMs, onError);
    this.#clock = clock;
    this.#timeoutMs = timeoutMs;
    this.#ruleArgs = `{${[...plan.ruleArgs(this.rule), expirySlackMs(this.rule)].join(',')}}`;
    this.#timeouts = new Timeouts(timeoutMs, (ms) => new PostgresTimeoutError(ms));
    this.#fallback = (error, call) => {
      report(onError, error, call.key);
      return policy(error, call.key, call.permits);
    };
    this.#order = new KeyOrder(this.#send);
    this.#coalescer = new Coalescer(this.#batch, MAX_BATCH);
    this.#waiting = new WaitQueue((key, permits) => this.tryAcquire(key, permits), clock === undefined ? systemScheduler : schedulerFor(clock));
  }

  /**
   * Decides a request for `permits` (default 1) by `key`: one round trip, shared with the other
   * calls of the same tick. Never rejects for a database failure: the outage policy answers
   * instead, marked `degraded`.
   * @throws TypeError when `key` is not a string or holds U+0000 (PostgreSQL text cannot); RangeError
   * when `permits` is not an integer from 1 to the limit (as a rejected promise).
   */
  tryAcquire(key: string, permits = 1): Promise<Decision> {
    if (typeof key !== 'string' || key.includes('\u0000')) {
      return Promise.reject(typeError(`ratekeeper: \`key\` must be a string without U+0000, got ${describe(key)}`));
    }
    try {
      checkPermits(permits, this.rule.limit);
    } catch (error) {
      return Promise.reject(error);
    }
    const now = this.#clock?.now();
    // A caller's clock is checked: NaN sent to the database would be stored as state.
    if (now !== undefined && !Number.isFinite(now)) return Promise.reject(rangeError(`ratekeeper: \`clock\` returned ${describe(now)}, not a finite number`));
    return new Promise((resolve) => this.#coalescer.add({ key, rowKey: this.#keyPrefix + key, permits, now, resolve, answered: false }, 0));
  }

  /**
   * Waits until `permits` (default 1) are granted to `key`, as `KeyedRateLimiter.acquire` does:
   * first in first out among this process's callers, each head woken by one timer at its exact
   * `retryAfterMs`, no polling. Callers in other processes compete for the same permits.
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   *
   * const limiter = new PostgresRateLimiter({ client: new pg.Pool(), algorithm: 'leaky-bucket', rule: Rule.perSecond(5), onStoreError: 'deny' });
   * const decision = await limiter.acquire('outbound-api', 1, { maxWaitMs: 2000 });
   * if (decision.allowed) console.log('send it');
   * ```
   */
  acquire(key: string, permits = 1, options?: AcquireOptions): Promise<Decision> {
    return this.#waiting.acquire(key, permits, options);
  }

  /**
   * Ends waiting, as `KeyedRateLimiter.close` does: every `acquire` still waiting rejects with a
   * `ClosedError` (code `ERR_RATEKEEPER_CLOSED`), its timer is cleared, and later `acquire` calls
   * reject at once. `tryAcquire` keeps answering. The client is yours and stays open: end it after.
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   * const pool = new pg.Pool();
   * const limiter = new PostgresRateLimiter({ client: pool, algorithm: 'token-bucket', rule: Rule.perSecond(5), onStoreError: 'deny' });
   * limiter.close();
   * await pool.end();
   * ```
   */
  override close(): void {
    this.#waiting.close();
  }

  /** A summary for logs and `JSON.stringify`: the algorithm, rule, schema, key prefix and timeout; never the client. */
  override toJSON(): { algorithm: PostgresAlgorithm; rule: Rule; schema: string; prefix: string; timeoutMs: number } {
    return { algorithm: this.#algorithm, rule: this.rule, schema: this.#schema, prefix: this.#prefix, timeoutMs: this.#timeoutMs };
  }

  /**
   * Starts the calls' deadline and hands them, as one batch, to the key order. The batch is
   * released to the coalescer at once, not when answered: the key order lets batches travel side
   * by side on the pool, so the coalescer only gathers the calls of one tick (and full batches).
   */
  readonly #batch = (calls: Call[], flight: { release(): void }): void => {
    const batch: CallBatch = { calls, keys: calls.map((call) => call.rowKey), abandoned: false };
    const deadline = this.#timeouts.start((error) => {
      batch.abandoned = true;
      this.#fail(calls, error);
    });
    batch.deadline = deadline;
    this.#order.add(batch);
    flight.release();
  };

  /**
   * Sends a batch as one statement, and answers each call from the reply or, failing that, from
   * the outage policy. A batch of one call (the usual one) takes the algorithm's one-key function,
   * a longer batch its many-keys function, which locks its keys in order (./sql/one-key.ts).
   */
  readonly #send = (batch: CallBatch): void => {
    const { calls, deadline } = batch;
    const callerClock = calls[0]!.now !== undefined;
    let sent: Promise<readonly unknown[]>;
    try {
      if (calls.length === 1) {
        const [{ rowKey, permits, now }] = calls as [Call];
        sent = this.#query(this.#oneKeyStatement, [rowKey, permits, callerClock ? now : null, this.#ruleArgs]);
      } else {
        const values = [textArray(calls), `{${calls.map((call) => call.permits).join(',')}}`, callerClock ? `{${calls.map((call) => call.now).join(',')}}` : null, this.#ruleArgs];
        sent = this.#query(this.#statement, values);
      }
    } catch (error) {
      // A client that throws instead of rejecting fails the same way.
      sent = Promise.reject(error);
    }
    sent.then(
      (rows) => {
        this.#order.done(batch);
        if (deadline!.settle()) this.#settle(calls, rows);
      },
      (error) => {
        this.#order.done(batch);
        if (deadline!.settle()) this.#fail(calls, error);
      },
    );
  };

  #settle(calls: Call[], rows: readonly unknown[]): void {
    let numbers: number[];
    try {
      const reply = (rows[0] as { r?: unknown } | undefined)?.r;
      // Number(null) is 0: a null in the reply is a wrong reply, not an allowance.
      numbers = checkReply(Array.isArray(reply) && !reply.includes(null) ? reply : rows, calls.length, 'PostgreSQL');
    } catch (error) {
      this.#fail(calls, error);
      return;
    }
    for (let i = 0; i < calls.length; i++) calls[i]!.resolve(toDecision(numbers, i, this.rule.limit));
  }

  #fail(calls: Call[], error: unknown): void {
    for (const call of calls) {
      try {
        call.resolve(this.#fallback(error, call));
      } catch (fallbackError) {
        // A fallback limiter that throws (say, for more permits than its own limit) fails this call alone.
        call.resolve(Promise.reject(fallbackError));
      }
    }
  }
}

/** The calls' row keys as a PostgreSQL array literal: each quoted, with `"` and `\` escaped. */
function textArray(calls: readonly Call[]): string {
  let literal = '{';
  for (let i = 0; i < calls.length; i++) {
    if (i > 0) literal += ',';
    literal += `"${calls[i]!.rowKey.replace(/["\\]/g, '\\$&')}"`;
  }
  return `${literal}}`;
}
