import { typeError } from '../core/errors';
import type { Decision } from '../core/decision';
import { type Rule, sharedPerRule } from '../core/rule';
import { checkString, describe } from '../core/validate';
import type { Flight } from '../store/coalescer';
import type { StoreCall, StoreEngine } from '../store/engine';
import { checkReply, toDecision, unexpectedReply } from '../store/reply';
import type { Query } from './client';
import { KeyOrder } from './key-order';
import type { PostgresAlgorithm } from './plans';
import {
  aloneRuleNumbers,
  concurrencyNumbers,
  leaseParams,
  leaseStatement,
  manyKeysParams,
  oneKeyParams,
  type Operation,
  operationParams,
  receiptId,
  replyNumbers,
  type RowKeyHeads,
  ownRule,
  ruleNumbers,
  type SentCall,
  type Statements,
  statements,
} from './protocol';
import { SKIPPED } from './sql/shell';
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
 * bounds its wait for a row lock by `lock_timeout`. What is sent and read is ./protocol.ts; each
 * call carries its own rule.
 */
export class PostgresEngine implements StoreEngine {
  readonly store = 'PostgreSQL';
  readonly maxBatch = MAX_BATCH;
  readonly ordered = true;
  readonly batchesOperations = true;
  readonly #query: Query;
  readonly #timeoutMs: number;
  /** A rate's statements; undefined for an in-flight limit alone. */
  readonly #statements: Statements | undefined;
  /** The lease function's statement, for a limiter with an in-flight limit (every call of it goes there). */
  readonly #lease: string;
  readonly #heads: RowKeyHeads;
  /** The rule's numbers as the functions read them (see ruleNumbers). */
  readonly #ruleArgs: (rule: Rule) => string;
  readonly #order: KeyOrder<StoreCall>;

  /** `algorithm` undefined: an in-flight limit alone (its calls each carry the limit). */
  constructor(query: Query, algorithm: PostgresAlgorithm | undefined, heads: RowKeyHeads, schema: string | undefined, timeoutMs: number) {
    this.#query = query;
    this.#timeoutMs = timeoutMs;
    this.#heads = heads;
    // Alone, the layer's rule is {limit, leaseMs}: the row keeps it where a rate keeps its rule.
    this.#ruleArgs = sharedPerRule((rule) => (algorithm === undefined ? aloneRuleNumbers({ limit: rule.limit, leaseMs: rule.windowMs }) : ruleNumbers(algorithm, rule)));
    this.#statements = algorithm === undefined ? undefined : statements(schema, algorithm, timeoutMs);
    this.#lease = leaseStatement(schema, algorithm, timeoutMs);
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
   * Sends a batch as one statement, each call under its own rule, and answers each call from the
   * reply or, failing that, with the failure. A decision alone in its batch (the usual call) takes
   * the algorithm's one-key function, a longer batch of decisions its batch function, which locks
   * its keys in order (./sql/shell.ts); any other operation, always alone, takes the general one.
   * A reservation's receipt is a random id drawn here, which the row keeps until its refund.
   */
  readonly #send = (calls: StoreCall[]): void => {
    let sent: Promise<readonly unknown[]>;
    const first = calls[0]!;
    try {
      const { concurrency } = first;
      if (first.op !== 'decide') {
        if (first.op === 'reserve') first.sent = receiptId();
        // A refund names its reservation; a charge may too (a settle past what was reserved releases it), an extension its lease.
        const receipt = first.op === 'reserve' ? first.sent : first.receipt;
        const id = typeof receipt === 'number' ? receipt : null;
        sent =
          concurrency === undefined
            ? this.#query(this.#statements!.decide, operationParams(this.#heads, first.op as Operation, this.#sent(first), id))
            : this.#query(this.#lease, leaseParams(this.#heads, first.op, this.#sent(first), id, concurrencyNumbers(concurrency)));
      } else if (calls.length === 1) {
        sent = this.#query(this.#statements!.oneKey, oneKeyParams(this.#heads, this.#sent(first)));
      } else {
        sent = this.#query(this.#statements!.manyKeys, manyKeysParams(this.#heads, calls.map(this.#sent)));
      }
    } catch (error) {
      // A client that throws instead of rejecting fails the same way.
      sent = Promise.reject(error);
    }
    void sent
      .then(
        (rows) => this.#settle(calls, rows),
        (error: unknown) => {
          this.#fail(calls, error);
          return [];
        },
      )
      .then((skipped) => this.#order.done(calls, skipped));
  };

  /** A call as ./protocol.ts sends it. */
  readonly #sent = (call: StoreCall): SentCall => ({ key: call.key, permits: call.amount, now: call.now, rule: this.#ruleArgs(call.rule) });

  /**
   * Answers the calls still unanswered from the reply (or, when it is not one of ours, with a reply
   * error); returns the decisions PostgreSQL skipped because another transaction held their row,
   * which the key order sends again.
   */
  #settle(calls: StoreCall[], rows: readonly unknown[]): StoreCall[] {
    const reply = replyNumbers(rows);
    const first = calls[0]!;
    if (first.op !== 'decide') {
      if (!Array.isArray(reply)) this.#fail(calls, unexpectedReply(rows, 'PostgreSQL'));
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

  /**
   * Answers an operation from its reply's numbers: a decision (a granted reservation's with its
   * receipt, the id sent), or none; an extension whether its lease was still held. With an
   * in-flight limit a decision's fourth number is its limit, the binding part's, and its fifth the
   * wait its rate and block prove (a refused reservation passes it on). A refund on a key counted
   * under another rule than the call's acted under the key's own, whose limit and windowMs follow
   * (its decision reports that rule).
   */
  #answer(call: StoreCall, reply: readonly string[]): void {
    if (call.op === 'block' || call.op === 'reset') return call.answer(undefined);
    if (call.op === 'extend') return reply.length === 1 && (reply[0] === '1' || reply[0] === '0') ? call.answer(undefined, reply[0] === '1') : call.fail(unexpectedReply(reply, 'PostgreSQL'));
    const leased = call.concurrency !== undefined;
    let decision: Decision;
    let proven = 0;
    let own: Rule | undefined;
    try {
      let numbers = reply;
      if (call.op === 'refund' && reply.length === (leased ? 7 : 5)) {
        own = ownRule(reply.slice(-2));
        numbers = reply.slice(0, -2);
      }
      const limit = leased ? Number(numbers[3]) : (own ?? call.rule).limit;
      if (leased) proven = Number(numbers[4]);
      if (leased && (numbers.length !== 5 || !Number.isSafeInteger(limit) || !Number.isSafeInteger(proven) || proven < 0)) throw unexpectedReply(reply, 'PostgreSQL');
      decision = toDecision(checkReply(numbers.length === 3 || leased ? numbers.slice(0, 3) : [reply], 1, 'PostgreSQL'), 0, limit);
    } catch (error) {
      return call.fail(error);
    }
    if (call.op !== 'reserve') call.answer(decision, undefined, undefined, own);
    else if (decision.allowed) call.answer(decision, call.sent);
    else call.answer(decision, undefined, leased ? proven : undefined);
  }

  /** Fails each call not yet answered (the layer answers a decision by the outage policy). */
  #fail(calls: readonly StoreCall[], error: unknown): void {
    // Our statements wait for a lock at most timeoutMs (lock_timeout): when the server's clock ends
    // the wait before ours does, it is still this call's timeout, not a store error.
    if (this.#timeoutMs !== Infinity && (error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE) error = new PostgresTimeoutError(this.#timeoutMs, error);
    for (const call of calls) call.fail(error);
  }
}

/** SQLSTATE lock_not_available: what a statement's `lock_timeout` ends it with. */
const LOCK_NOT_AVAILABLE = '55P03';
