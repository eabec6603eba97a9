import type { Decision } from '../core/decision';
import { reject } from '../core/decision';
import { type Rule, sharedPerRule } from '../core/rule';
import { checkString } from '../core/validate';
import type { Flight } from '../store/coalescer';
import type { StoreCall, StoreEngine } from '../store/engine';
import { BatchSender, type Call } from './batch-sender';
import { clientKeyPrefix, isClientClosed, isClusterClient, type RedisScriptClient, toScriptClient } from './client';
import { type KeyOperation, KeyOperations } from './key-operations';
import { startUp } from './readiness';
import type { ScriptPlan } from './scripts';
import { hashSlot } from './slot';
import { RedisTimeoutError } from './timeout';

/**
 * The most decisions one script call carries. Small enough that a full batch leaves at once, beside
 * the round, instead of waiting for it, and that one script holds Redis (and its other clients)
 * only briefly; 16 beat 32 with 64 callers (bench/HISTORY.md).
 */
const MAX_BATCH = 16;

/**
 * Handed to the sender's `resolve` when a call failed: the layer has answered it already (through
 * `fail`), by the outage policy, so this placeholder is dropped.
 */
const ANSWERED: Decision = reject(1, 0, 1, 1);

/** A layer call as the BatchSender sees it: it answers the layer's call. */
class SenderCall implements Call {
  readonly key: string;
  readonly redisKey: string;
  readonly permits: number;
  readonly now: number;
  readonly deadline: number;
  answered = false;
  script: Call['script'] = undefined;
  readonly call: StoreCall;
  readonly sender: BatchSender;

  constructor(call: StoreCall, sender: BatchSender) {
    this.call = call;
    this.sender = sender;
    this.key = call.key;
    this.redisKey = call.storeKey;
    this.permits = call.amount;
    this.now = call.now ?? 0;
    this.deadline = call.deadline;
    call.sent = this;
  }

  resolve(decision: Decision | Promise<Decision>): void {
    if (decision !== ANSWERED) this.call.answer(decision as Decision);
  }

  reject(error: unknown): void {
    this.call.fail(error);
  }
}

/**
 * Redis (and Valkey, Upstash) under the store layer: decisions go to a {@link BatchSender} (one
 * per rule, each holding its rule's script arguments), which keeps NOSCRIPT reloads in order; key
 * operations go alone through {@link KeyOperations}. On a cluster a batch holds keys of one hash
 * slot, computed on the key the server sees (ioredis's `keyPrefix` included).
 */
export class RedisEngine implements StoreEngine {
  readonly store = 'Redis';
  readonly maxBatch = MAX_BATCH;
  readonly ordered: boolean;
  readonly batchesOperations = false;
  readonly #client: unknown;
  readonly #slotPrefix: string | undefined;
  readonly #sender: (rule: Rule) => BatchSender;
  readonly #operations: (rule: Rule) => KeyOperations;

  /** @throws TypeError for a client of no known shape. */
  constructor(client: unknown, plan: ScriptPlan, callerClock: boolean) {
    const scriptClient: RedisScriptClient = toScriptClient(client);
    this.#client = client;
    this.ordered = scriptClient.ordered === true;
    this.#slotPrefix = isClusterClient(client) ? clientKeyPrefix(client) : undefined;
    const starting = startUp(client);
    this.#sender = sharedPerRule(
      (rule) =>
        new BatchSender({
          client: scriptClient,
          plan,
          ruleArgs: plan.ruleArgs(rule),
          limit: rule.limit,
          callerClock,
          // The layer remembers refusals and answers failures (see SenderCall).
          refusals: undefined,
          fallback: (error, call) => {
            (call as SenderCall).call.fail(error);
            return ANSWERED;
          },
          startUp: starting,
        }),
    );
    // Unbounded here: the layer bounds every call.
    this.#operations = sharedPerRule(
      (rule) => new KeyOperations({ client: scriptClient, script: plan.script, ruleArgs: plan.ruleArgs(rule), limit: rule.limit, clock: undefined, timeoutMs: Infinity, startUp: starting }),
    );
  }

  checkKey(key: string): void {
    checkString('key', key);
  }

  group(storeKey: string): number {
    return this.#slotPrefix === undefined ? 0 : hashSlot(this.#slotPrefix + storeKey);
  }

  send(calls: StoreCall[], flight: Flight): void {
    const [first] = calls;
    if (first!.op !== 'decide') return this.#operate(first!);
    const sender = this.#sender(first!.rule);
    sender.send(
      calls.map((call) => new SenderCall(call, sender)),
      flight,
    );
  }

  timedOut(call: StoreCall): void {
    const sent = call.sent as SenderCall | undefined;
    if (sent === undefined || sent.answered) return;
    sent.answered = true;
    // The layer has answered the call; the sender only lets go of what the call held back.
    sent.sender.timedOut(sent, new RedisTimeoutError(Infinity));
  }

  timeoutError(timeoutMs: number, what?: string): Error {
    return new RedisTimeoutError(timeoutMs, what);
  }

  clientClosed(): boolean {
    return isClientClosed(this.#client);
  }

  /** One key operation, alone: one script call on its key (atomic, Cluster-safe). */
  #operate(call: StoreCall): void {
    const operations = this.#operations(call.rule);
    const { op, amount, now } = call;
    // A reset is the same at any time: it reads no clock.
    const reading = op === 'reset' || now === undefined ? '' : String(now);
    let args: string[];
    if (op === 'reset') args = [];
    else if (op === 'reserve') {
      // The stamp a key's receipts carry, drawn here: a key reset and reserved again gets another,
      // so an old receipt gives nothing back (a chance of 2^-52 that it matches).
      args = [String(amount), String(1 + Math.floor(Math.random() * 2 ** 52))];
    } else if (op === 'refund') args = [String(amount), ...(call.receipt as readonly string[])];
    else args = [String(amount)];
    let reply: Promise<unknown>;
    try {
      reply = operations.run(call.storeKey, op as KeyOperation, reading, args);
    } catch (error) {
      return call.fail(error);
    }
    reply.then((reply) => {
      try {
        if (op === 'block' || op === 'reset') {
          operations.done(reply);
          call.answer(undefined);
        } else if (op === 'reserve') {
          const { decision, receipt } = operations.reservation(reply);
          call.answer(decision, receipt);
        } else {
          call.answer(operations.decision(reply));
        }
      } catch (error) {
        call.fail(error);
      }
    }, (error: unknown) => call.fail(error));
  }
}
