import { checkCharge } from '../algorithms/accounting';
import type { Clock } from '../core/clock';
import type { Decision } from '../core/decision';
import { coded, rangeError, typeError } from '../core/errors';
import type { Rule } from '../core/rule';
import { Closable } from '../core/symbols';
import { checkPermits, checkString, describe, integerIn } from '../core/validate';
import type { AcquireOptions } from '../limiter/acquire-options';
import { MAX_BLOCK_MS } from '../limiter/key-blocks';
import type { AsyncRateLimiter } from '../limiter/keyed-rate-limiter';
import { AsyncKeyReservation, type AsyncReservation } from '../limiter/reservation';
import { schedulerFor, systemScheduler } from '../limiter/scheduler';
import { WaitQueue } from '../limiter/wait-queue';
import { Coalescer } from '../redis/coalescer';
import { outagePolicy, peekOutagePolicy } from '../redis/outage-policy';
import { checkReply, toDecision } from '../redis/reply';
import { checkStoreOptions, report, toRule } from '../redis/store-options';
import { CallTimeouts } from '../redis/timeout';
import { type Query, toQuery } from './client';
import { KeyOrder } from './key-order';
import type { PostgresRateLimiterOptions } from './options';
import { codecs, type PostgresAlgorithm } from './plans';
import { manyKeysParams, oneKeyParams, operationParams, receiptId, replyNumbers, rowKeyHeads, ruleNumbers, type Statements, statements } from './protocol';
import { SKIPPED } from './sql/shell';
import { PostgresTimeoutError } from './timeout-error';

/**
 * The most decisions one round trip carries. Their rows stay locked until the statement ends, and
 * a pool runs several batches side by side on its connections (one backend each), so batches are
 * kept short: short batches gave more decisions/s than long ones (bench/HISTORY.md).
 */
const MAX_BATCH = 4;

/** One decision on its way to PostgreSQL. */
interface Call {
  /** Undefined for a decision (`tryAcquire`), which may share its round trip with others. */
  readonly op?: undefined;
  readonly key: string;
  readonly rowKey: string;
  readonly permits: number;
  /** The caller's clock reading, or undefined when the server's clock decides. */
  readonly now: number | undefined;
  /** The call's rule, as the SQL reads it (`ruleNumbers`). */
  readonly rule: string;
  readonly resolve: (decision: Decision | Promise<Decision>) => void;
  /** `performance.now()` reading after which the outage policy answers (see CallTimeouts). */
  readonly deadline: number;
  /** Set once answered, by the reply, a failure or the timeout: each call is answered once. */
  answered: boolean;
}

/**
 * Any other operation (see `ratekeeper_decide`): it travels alone, in its turn among the calls made
 * on its key, and is answered with the reply's numbers as the client gives them.
 */
interface OpCall {
  readonly op: 'peek' | 'charge' | 'reserve' | 'refund' | 'block' | 'reset';
  readonly key: string;
  readonly rowKey: string;
  /** Permits, or a block's duration in ms. */
  readonly permits: number;
  readonly now: number | undefined;
  readonly rule: string;
  /** A reservation's id, for 'reserve' and 'refund'. */
  readonly receipt: number | null;
  readonly reply: (numbers: readonly unknown[]) => void;
  readonly fail: (error: unknown) => void;
  readonly deadline: number;
  answered: boolean;
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
  readonly #statements: Statements;
  readonly #heads: ReturnType<typeof rowKeyHeads>;
  readonly #ruleArgs: string;
  readonly #algorithm: PostgresAlgorithm;
  readonly #schema: string;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #clock: Clock | undefined;
  readonly #timeouts: CallTimeouts<Call | OpCall>;
  readonly #fallback: (error: unknown, call: Call) => Decision | Promise<Decision>;
  readonly #peekFallback: (error: unknown, key: string, permits: number) => Decision | Promise<Decision>;
  readonly #policy: (error: unknown, key: string, permits: number) => Decision | Promise<Decision>;
  /** Hands a failure's cause to `onError`, as an `Error`. */
  readonly #report: (error: unknown, key: string) => void;
  readonly #coalescer: Coalescer<Call | OpCall>;
  readonly #order: KeyOrder<Call | OpCall>;
  readonly #waiting: WaitQueue;

  /** @throws TypeError or RangeError naming the option, before anything is sent to PostgreSQL. */
  constructor(options: PostgresRateLimiterOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: PostgresRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { client, algorithm, rule, onStoreError, schema, prefix = 'ratekeeper:', clock, timeoutMs = 500, onError } = options;
    if (typeof algorithm !== 'string' || !Object.hasOwn(codecs, algorithm)) {
      throw typeError(`ratekeeper: \`algorithm\` must be one of ${Object.keys(codecs).map((name) => `'${name}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    this.rule = toRule(rule);
    this.#query = toQuery(client);
    const hear = (error: unknown, key: string) => report(onError, error, key, 'PostgreSQL');
    const policy = outagePolicy(onStoreError, { rule: this.rule, timeoutMs, report: hear });
    this.#policy = policy;
    this.#report = hear;
    checkString('prefix', prefix);
    if (prefix.includes('\u0000')) throw typeError(`ratekeeper: \`prefix\` must be a string without U+0000, got ${describe(prefix)}`);
    this.#algorithm = algorithm;
    this.#schema = schema ?? 'ratekeeper';
    this.#prefix = prefix;
    this.#heads = rowKeyHeads(prefix, algorithm);
    checkStoreOptions(clock, timeoutMs, onError);
    this.#clock = clock;
    this.#timeoutMs = timeoutMs;
    this.#ruleArgs = ruleNumbers(algorithm, this.rule);
    this.#timeouts = new CallTimeouts(timeoutMs, this.#answerFailed, (ms) => new PostgresTimeoutError(ms));
    this.#statements = statements(schema, algorithm, timeoutMs);
    this.#fallback = (error, call) => {
      hear(error, call.key);
      return policy(error, call.key, call.permits);
    };
    const peekPolicy = peekOutagePolicy(onStoreError, { rule: this.rule, timeoutMs, report: hear });
    this.#peekFallback = (error, key, permits) => {
      hear(error, key);
      return peekPolicy(error, key, permits);
    };
    this.#order = new KeyOrder(this.#send, MAX_BATCH);
    this.#coalescer = new Coalescer(this.#batch, MAX_BATCH, true);
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
    let now: number | undefined;
    try {
      this.#checkKey(key);
      checkPermits(permits, this.rule.limit);
      now = this.#read();
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve) =>
      this.#start({ key, rowKey: this.#heads.head + key, permits, now, rule: this.#ruleArgs, resolve, deadline: this.#timeouts.deadline(), answered: false }),
    );
  }

  /**
   * What `tryAcquire(key, permits)` would answer now (a block included), as `KeyedRateLimiter.peek`:
   * spends nothing and stores no row. `permits` 0 answers the state now, for a dashboard:
   * `remaining` is the whole permits available now, `resetAfterMs` the time until the key is as
   * new, and `allowed` is false only while the key is blocked. When PostgreSQL fails, the outage
   * policy answers, marked `degraded` (a fallback limiter is asked its own `peek`, so it spends
   * nothing; one without `peek` answers as `'deny'`).
   * @throws TypeError or RangeError as `tryAcquire` does, `permits` 0 allowed (as a rejected promise).
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   * const limiter = new PostgresRateLimiter({ client: new pg.Pool(), algorithm: 'token-bucket', rule: Rule.perMinute(60), onStoreError: 'allow' });
   * const { remaining } = await limiter.peek('user-1', 0); // left now, and nothing spent
   * ```
   */
  peek(key: string, permits = 1): Promise<Decision> {
    try {
      if (permits !== 0) checkPermits(permits, this.rule.limit);
      return this.#operate('peek', key, permits)
        .then((numbers) => this.#decision(numbers))
        .catch((error: unknown) => this.#peekFallback(error, key, permits));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Forgets `key`, as `KeyedRateLimiter.reset`: its row goes, state and block alike, and every later
   * decision is a never-seen key's. Those waiting on it in this process are tried again at once;
   * outstanding reservations of the key give nothing back. Rejects with the error when PostgreSQL
   * fails (`PostgresTimeoutError` after `timeoutMs`): the key may not have been reset.
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   * const failures = new PostgresRateLimiter({ client: new pg.Pool(), algorithm: 'sliding-window-log', rule: Rule.perHour(10), onStoreError: 'deny' });
   * await failures.reset('alice'); // she logged in: her failures no longer count
   * ```
   */
  async reset(key: string): Promise<void> {
    await this.#operate('reset', key, 0);
    this.#waiting.wake(key);
  }

  /**
   * Counts `permits` that were already used, as `KeyedRateLimiter.charge`: never refused, and
   * `permits` may exceed the limit. What fits is spent exactly as `tryAcquire` would; beyond that
   * the key goes into debt, at most one full limit deep (the rest is forgiven), and is refused
   * until the debt is repaid, with exact `retryAfterMs`; the row lives until then. Resolves with
   * the key's state after, as `peek(key, 0)` would without a block. Rejects with the error when
   * PostgreSQL fails: the charge may not have been counted.
   * @throws TypeError for a bad key; RangeError when `permits` is not a positive safe integer (as a rejected promise).
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   * const limiter = new PostgresRateLimiter({ client: new pg.Pool(), algorithm: 'fixed-window', rule: Rule.perMinute(10), onStoreError: 'deny' });
   * (await limiter.charge('user-1', 14)).remaining; // 0: 4 in debt until the minute ends
   * ```
   */
  async charge(key: string, permits: number): Promise<Decision> {
    checkCharge(permits);
    return this.#decision(await this.#operate('charge', key, permits));
  }

  /**
   * Refuses every request of `key` for `durationMs` from now, as `KeyedRateLimiter.block`: each
   * refusal spends nothing and waits the longer of the time left and what the algorithm alone
   * would say. Kept in the row apart from the counts, so no charge or refund lifts it; a shorter
   * block never shortens a longer one; `reset` lifts it; the row outlives it. `durationMs` is a
   * whole number of ms from 0 to 2^42 (about 139 years). Rejects with the error when PostgreSQL
   * fails: the key may not be blocked.
   * @throws TypeError for a bad key; RangeError for a bad duration (as a rejected promise).
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   * const logins = new PostgresRateLimiter({ client: new pg.Pool(), algorithm: 'sliding-window-log', rule: Rule.perHour(10), onStoreError: 'deny' });
   * await logins.block('alice', 3_600_000);
   * ```
   */
  async block(key: string, durationMs: number): Promise<void> {
    integerIn('durationMs', durationMs, 0, MAX_BLOCK_MS);
    if (durationMs > 0) return void (await this.#operate('block', key, durationMs));
    // A block of 0 ms blocks nothing: no row for it. The clock is read all the same, as in memory.
    this.#checkKey(key);
    this.#read();
  }

  /**
   * Grants (or refuses) `permits` (default 1) now, exactly as `tryAcquire`, for a request whose real
   * cost is known only later, as `KeyedRateLimiter.reserve`: settle the reservation once with that
   * cost. What was not used is given back exactly (only what is still counted: never what time
   * already repaid, never in another window, nothing after a reset), what was over is charged.
   * When PostgreSQL fails the outage policy decides, marked `degraded`, and the reservation has
   * nothing to settle; a `settle` or `cancel` that fails rejects with the error.
   * @throws as `tryAcquire` does (as a rejected promise).
   *
   * @example
   * ```ts
   * import pg from 'pg';
   * import { Rule } from 'ratekeeper';
   * import { PostgresRateLimiter } from 'ratekeeper/postgres';
   * const tokens = new PostgresRateLimiter({ client: new pg.Pool(), algorithm: 'token-bucket', rule: Rule.perMinute(10_000), onStoreError: 'deny' });
   * const reservation = await tokens.reserve('team-1', 2000);
   * if (reservation.decision.allowed) await reservation.settle(500); // 1500 were not used
   * ```
   */
  async reserve(key: string, permits = 1): Promise<AsyncReservation> {
    checkPermits(permits, this.rule.limit);
    // Sent before the try: a bad key or clock reading throws here, not to the outage policy.
    const receipt = receiptId();
    const sent = this.#operate('reserve', key, permits, receipt);
    let decision: Decision;
    try {
      decision = this.#decision(await sent);
    } catch (error) {
      this.#report(error, key);
      return new AsyncKeyReservation(await this.#policy(error, key, permits), undefined);
    }
    if (!decision.allowed) return new AsyncKeyReservation(decision, undefined);
    return new AsyncKeyReservation(decision, async (actual) => {
      // Past what was reserved: the receipt goes with the charge of the excess, in one call.
      if (actual > permits) return this.#decision(await this.#operate('charge', key, actual - permits, receipt));
      const after = this.#decision(await this.#operate('refund', key, permits - actual, receipt));
      if (actual < permits) this.#waiting.wake(key);
      return after;
    });
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
   * Sends any operation but a decision, in its turn among the calls on its key; resolves with the
   * reply's numbers. A reset reads no clock (as in memory: it has no use for the time).
   */
  #operate(op: OpCall['op'], key: string, permits: number, receipt: number | null = null): Promise<readonly unknown[]> {
    this.#checkKey(key);
    const now = op === 'reset' ? undefined : this.#read();
    return new Promise((reply, fail) =>
      this.#start({ op, key, rowKey: this.#heads.head + key, permits, now, rule: this.#ruleArgs, receipt, reply, fail, deadline: this.#timeouts.deadline(), answered: false }),
    );
  }

  /** Starts the call's clock (it waits for its key, if need be, within its own timeout) and queues it. */
  #start(call: Call | OpCall): void {
    this.#timeouts.add(call);
    this.#coalescer.add(call, 0);
  }

  /** The decision in a reply of three numbers. */
  #decision(reply: readonly unknown[]): Decision {
    const numbers = reply.length === 3 ? reply : [reply];
    return toDecision(checkReply(numbers, 1, 'PostgreSQL'), 0, this.rule.limit);
  }

  /** @throws TypeError unless `key` is a string PostgreSQL text can hold, and well-formed UTF-16 (as every store's keys: see checkString). */
  #checkKey(key: string): void {
    if (typeof key !== 'string' || key.includes('\u0000')) throw typeError(`ratekeeper: \`key\` must be a string without U+0000, got ${describe(key)}`);
    checkString('key', key);
  }

  /** The caller's clock reading, checked (NaN sent to the database would be stored as state), or undefined for the server's. */
  #read(): number | undefined {
    const now = this.#clock?.now();
    if (now !== undefined && !Number.isFinite(now)) throw rangeError(`ratekeeper: \`clock\` returned ${describe(now)}, not a finite number`);
    return now;
  }

  /**
   * Hands the calls of one tick to the key order, which makes the batches. They are released to the
   * coalescer at once, not when answered: the key order lets batches travel side by side on the
   * pool, so the coalescer only gathers the calls of one tick (and full batches).
   */
  readonly #batch = (calls: (Call | OpCall)[], flight: { release(): void }): void => {
    this.#order.add(calls);
    flight.release();
  };

  /**
   * Sends a batch as one statement, and answers each call from the reply or, failing that, from
   * the outage policy. An acquire alone in its batch (the usual call) takes the algorithm's one-key
   * function, a longer batch of acquires its many-keys function, which locks its keys in order
   * (./sql/shell.ts); any other operation, always alone, takes the general function.
   */
  readonly #send = (calls: (Call | OpCall)[]): void => {
    let sent: Promise<readonly unknown[]>;
    try {
      const [first] = calls;
      if (first!.op !== undefined) sent = this.#query(this.#statements.decide, operationParams(this.#heads, first!.op, first!, first!.receipt));
      else if (calls.length === 1) sent = this.#query(this.#statements.oneKey, oneKeyParams(this.#heads, first!));
      else sent = this.#query(this.#statements.manyKeys, manyKeysParams(this.#heads, calls));
    } catch (error) {
      // A client that throws instead of rejecting fails the same way.
      sent = Promise.reject(error);
    }
    sent.then(
      (rows) => {
        this.#order.done(calls, this.#settle(calls, rows));
      },
      (error) => {
        this.#fail(calls, error);
        this.#order.done(calls, []);
      },
    );
  };

  /**
   * Answers the calls still unanswered from the reply (or, when it is not one of ours, from the
   * outage policy); returns the decisions PostgreSQL skipped because another transaction held
   * their row, which the key order sends again.
   */
  #settle(calls: (Call | OpCall)[], rows: readonly unknown[]): Call[] {
    const reply = replyNumbers(rows);
    const [first] = calls;
    if (first!.op !== undefined) {
      if (!Array.isArray(reply)) {
        this.#fail(calls, unexpectedReply(rows));
        return [];
      }
      if (!first!.answered) {
        first!.answered = true;
        first!.reply(reply);
      }
      return [];
    }
    const decisions = calls as Call[];
    let numbers: number[];
    try {
      numbers = checkReply(reply ?? rows, decisions.length, 'PostgreSQL');
    } catch (error) {
      this.#fail(decisions, error);
      return [];
    }
    const skipped: Call[] = [];
    for (let i = 0; i < decisions.length; i++) {
      const call = decisions[i]!;
      if (numbers[3 * i + 1] === SKIPPED) skipped.push(call);
      else if (!call.answered) {
        call.answered = true;
        call.resolve(toDecision(numbers, i, this.rule.limit));
      }
    }
    return skipped;
  }

  /** Answers each call not yet answered by the outage policy (an operation: rejects with the error). */
  #fail(calls: readonly (Call | OpCall)[], error: unknown): void {
    // Our statements wait for a lock at most timeoutMs (lock_timeout): when the server's clock ends
    // the wait before ours does, it is still this call's timeout, not a store error.
    if (this.#timeoutMs !== Infinity && (error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE) error = new PostgresTimeoutError(this.#timeoutMs, error);
    for (const call of calls) {
      if (call.answered) continue;
      call.answered = true;
      this.#answerFailed(call, error);
    }
  }

  readonly #answerFailed = (call: Call | OpCall, error: unknown): void => {
    if (call.op !== undefined) return call.fail(error);
    try {
      call.resolve(this.#fallback(error, call));
    } catch (fallbackError) {
      // A fallback limiter that throws (say, for more permits than its own limit) fails this call alone.
      call.resolve(Promise.reject(fallbackError));
    }
  };
}

/** SQLSTATE lock_not_available: what a statement's `lock_timeout` ends it with. */
const LOCK_NOT_AVAILABLE = '55P03';

function unexpectedReply(rows: unknown): Error {
  return coded(new Error(`ratekeeper: unexpected reply from PostgreSQL: ${describe(rows)}`), 'ERR_RATEKEEPER_STORE_REPLY');
}
