import { coded, typeError } from '../core/errors';
import type { Decision } from '../core/decision';
import { type Rule, sharedPerRule } from '../core/rule';
import { checkString, describe } from '../core/validate';
import type { Flight } from '../store/coalescer';
import type { StoreCall, StoreEngine } from '../store/engine';
import { checkReply, toDecision } from '../store/reply';
import type { Query } from './client';
import { KeyOrder } from './key-order';
import { quotedSchema } from './migrate';
import { expirySlackMs, type SqlPlan } from './plans';
import { manyKeysFunction, oneKeyFunction, SKIPPED } from './sql/one-key';
import { PostgresTimeoutError } from './timeout-error';

/**
 * The most decisions one round trip carries. Their rows stay locked until the statement ends, and
 * a pool runs several batches side by side on its connections (one backend each), so batches are
 * kept short: short batches gave more decisions/s than long ones (bench/HISTORY.md).
 */
const MAX_BATCH = 4;

/**
 * PostgreSQL under the store layer: the calls of one tick go to the key order, which sends them as
 * batches side by side on the pool, the calls on one key in the order made; a decision another
 * transaction holds the row of is skipped by the database and sent again alone. Every statement
 * bounds its wait for a row lock by `lock_timeout`.
 */
export class PostgresEngine implements StoreEngine {
  readonly store = 'PostgreSQL';
  readonly maxBatch = MAX_BATCH;
  readonly ordered = true;
  readonly batchesOperations = true;
  readonly #query: Query;
  readonly #codec: string;
  readonly #timeoutMs: number;
  readonly #decideStatement: string;
  readonly #manyKeysStatement: string;
  readonly #oneKeyStatement: string;
  /** The rule's numbers as the functions read them: the codec's, then the expiry slack. */
  readonly #ruleArgs: (rule: Rule) => string;
  readonly #order: KeyOrder<StoreCall>;

  constructor(query: Query, plan: SqlPlan, schema: string | undefined, timeoutMs: number) {
    this.#query = query;
    this.#codec = plan.codec;
    this.#timeoutMs = timeoutMs;
    this.#ruleArgs = sharedPerRule((rule) => `{${[...plan.ruleArgs(rule), expirySlackMs(rule)].join(',')}}`);
    // No row lock held elsewhere keeps a call, or the connection it holds, past its timeout: the
    // statement's transaction waits for a lock at most timeoutMs (set_config's third argument: for
    // this transaction only, which PgBouncer in transaction mode allows). Set before the function
    // runs: the subquery's row is made before the select list is evaluated.
    const bound = timeoutMs === Infinity ? '' : ` FROM (SELECT set_config('lock_timeout', '${timeoutMs}', true) AS lock_timeout) AS bound`;
    // The reply's numbers as one text, split here: a client parses an array only when it knows its
    // type (postgres.js with `fetch_types: false`, as behind PgBouncer, hands over `{1,0,3}`), pg
    // parses numeric[] into floats, and a receipt's numbers may pass 2^53.
    const reply = (call: string) => `SELECT array_to_string(${quotedSchema(schema)}.${call}, ',', 'NULL') AS r${bound}`;
    this.#decideStatement = reply('ratekeeper_decide($1::text, $2::numeric[], $3::text[], $4::numeric[], $5::numeric[], $6::text, $7::numeric[])');
    this.#manyKeysStatement = reply(`${manyKeysFunction(plan.codec)}($1::text[], $2::numeric[], $3::numeric[], $4::numeric[])`);
    this.#oneKeyStatement = reply(`${oneKeyFunction(plan.codec)}($1::text, $2::numeric, $3::numeric, $4::numeric[])`);
    this.#order = new KeyOrder(this.#send, MAX_BATCH);
  }

  /** @throws TypeError unless `key` is a string PostgreSQL text can hold, and well-formed UTF-16 (as every store's keys: see checkString). */
  checkKey(key: string): void {
    if (typeof key !== 'string' || key.includes('\u0000')) throw typeError(`ratekeeper: \`key\` must be a string without U+0000, got ${describe(key)}`);
    checkString('key', key);
  }

  group(): number {
    return 0;
  }

  /**
   * Hands the calls of one tick to the key order, which makes the batches. They are released to the
   * coalescer at once, not when answered: the key order lets batches travel side by side on the
   * pool, so the coalescer only gathers the calls of one tick (and full batches).
   */
  send(calls: StoreCall[], flight: Flight): void {
    this.#order.add(calls);
    flight.release();
  }

  timedOut(): void {
    // Nothing is held back for a call: the key order waits only for batches, which always come back.
  }

  timeoutError(timeoutMs: number, what?: string): Error {
    return new PostgresTimeoutError(timeoutMs, undefined, what);
  }

  clientClosed(): boolean {
    return false;
  }

  /**
   * Sends a batch as one statement (one per rule, when its decisions differ in rule), and answers
   * each call from the reply or, failing that, with the failure. A decision alone in its batch (the
   * usual call) takes the algorithm's one-key function, a longer batch of decisions its many-keys
   * function, which locks its keys in order (./sql/one-key.ts); any other operation, always alone,
   * takes `ratekeeper_decide`.
   */
  readonly #send = (batch: StoreCall[]): void => {
    const { rule } = batch[0]!;
    if (batch.every((call) => call.rule === rule)) {
      void this.#statement(batch, rule).then((skipped) => this.#order.done(batch, skipped));
      return;
    }
    const byRule = new Map<Rule, StoreCall[]>();
    for (const call of batch) {
      const same = byRule.get(call.rule);
      if (same === undefined) byRule.set(call.rule, [call]);
      else same.push(call);
    }
    void Promise.all([...byRule].map(([each, same]) => this.#statement(same, each))).then((skipped) => this.#order.done(batch, skipped.flat()));
  };

  /** Sends one statement for calls of one rule; resolves with the decisions PostgreSQL skipped. */
  #statement(calls: StoreCall[], rule: Rule): Promise<StoreCall[]> {
    const ruleArgs = this.#ruleArgs(rule);
    const callerClock = calls[0]!.now !== undefined;
    let sent: Promise<readonly unknown[]>;
    try {
      const first = calls[0]!;
      if (first.op !== 'decide') {
        const { op, amount, now, receipt } = first;
        sent = this.#query(this.#decideStatement, [this.#codec, ruleArgs, textArray(calls), `{${amount}}`, callerClock ? `{${now}}` : null, op, (receipt as string | undefined) ?? null]);
      } else if (calls.length === 1) {
        const { storeKey, amount, now } = first;
        sent = this.#query(this.#oneKeyStatement, [storeKey, amount, callerClock ? now : null, ruleArgs]);
      } else {
        const values = [textArray(calls), `{${calls.map((call) => call.amount).join(',')}}`, callerClock ? `{${calls.map((call) => call.now).join(',')}}` : null, ruleArgs];
        sent = this.#query(this.#manyKeysStatement, values);
      }
    } catch (error) {
      // A client that throws instead of rejecting fails the same way.
      sent = Promise.reject(error);
    }
    return sent.then(
      (rows) => this.#settle(calls, rows),
      (error: unknown) => {
        this.#fail(calls, error);
        return [];
      },
    );
  }

  /**
   * Answers the calls still unanswered from the reply (or, when it is not one of ours, with a reply
   * error); returns the decisions PostgreSQL skipped because another transaction held their row,
   * which the key order sends again.
   */
  #settle(calls: StoreCall[], rows: readonly unknown[]): StoreCall[] {
    const text = (rows[0] as { r?: unknown } | undefined)?.r;
    // A NULL among the numbers reads NaN, which checkReply refuses; a reset answers none.
    const reply = typeof text !== 'string' ? undefined : text === '' ? [] : text.split(',');
    const first = calls[0]!;
    if (first.op !== 'decide') {
      if (!Array.isArray(reply)) this.#fail(calls, unexpectedReply(rows));
      else this.#answer(first, reply);
      return [];
    }
    let numbers: number[];
    try {
      numbers = checkReply(reply ?? rows, calls.length, 'PostgreSQL');
    } catch (error) {
      this.#fail(calls, error);
      return [];
    }
    const skipped: StoreCall[] = [];
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i]!;
      if (numbers[3 * i + 1] === SKIPPED) skipped.push(call);
      else call.answer(toDecision(numbers, i, call.rule.limit));
    }
    return skipped;
  }

  /** Answers an operation from its reply's numbers: a decision (a reservation's followed by its receipt), or none. */
  #answer(call: StoreCall, reply: readonly string[]): void {
    if (call.op === 'block' || call.op === 'reset') return call.answer(undefined);
    let decision: Decision;
    try {
      decision = this.#decision(call, reply, call.op === 'reserve' ? 6 : 3);
    } catch (error) {
      return call.fail(error);
    }
    const receipt = call.op === 'reserve' && decision.allowed ? `{${reply.slice(3, 6).join(',')}}` : undefined;
    call.answer(decision, receipt);
  }

  /** The decision in a reply of `length` numbers (more than 3 when a receipt follows it). */
  #decision(call: StoreCall, reply: readonly unknown[], length: number): Decision {
    const numbers = reply.length === length ? reply.slice(0, 3) : [reply];
    return toDecision(checkReply(numbers, 1, 'PostgreSQL'), 0, call.rule.limit);
  }

  /** Fails each call not yet answered (the layer answers a decision by the outage policy). */
  #fail(calls: readonly StoreCall[], error: unknown): void {
    // Our statements wait for a lock at most timeoutMs (lock_timeout): when the server's clock ends
    // the wait before ours does, it is still this call's timeout, not a store error.
    if (this.#timeoutMs !== Infinity && (error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE) error = new PostgresTimeoutError(this.#timeoutMs, error);
    for (const call of calls) call.fail(error);
  }
}

/** The calls' row keys as a PostgreSQL array literal: each quoted, with `"` and `\` escaped. */
function textArray(calls: readonly StoreCall[]): string {
  let literal = '{';
  for (let i = 0; i < calls.length; i++) {
    if (i > 0) literal += ',';
    literal += `"${calls[i]!.storeKey.replace(/["\\]/g, '\\$&')}"`;
  }
  return `${literal}}`;
}

/** SQLSTATE lock_not_available: what a statement's `lock_timeout` ends it with. */
const LOCK_NOT_AVAILABLE = '55P03';

function unexpectedReply(rows: unknown): Error {
  return coded(new Error(`ratekeeper: unexpected reply from PostgreSQL: ${describe(rows)}`), 'ERR_RATEKEEPER_STORE_REPLY');
}
