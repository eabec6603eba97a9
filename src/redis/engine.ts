import { checkString } from '../core/validate';
import type { Flight } from '../store/coalescer';
import type { JointEngine, StoreCall, StoreEngine } from '../store/engine';
import { BatchSender } from './batch-sender';
import { clientKeyPrefix, isClientClosed, isClusterClient, runScript, type RedisScriptClient } from './client';
import { type KeyOperation, legacySplit, operationArguments, operationDecision, operationDone, receiptId } from './protocol';
import { RedisJoint } from './joint';
import { startUp } from './readiness';
import type { LuaScript, ScriptPlan } from './scripts';
import { hashSlot } from './slot';
import { RedisTimeoutError } from './timeout';

/**
 * The most decisions one script call carries. Small enough that a full batch leaves at once, beside
 * the round, instead of waiting for it, and that one script holds Redis (and its other clients)
 * only briefly; 16 beat 32 with 64 callers (bench/HISTORY.md).
 */
const MAX_BATCH = 16;

/**
 * Redis (and Valkey, Upstash) under the store layer: decisions go to one {@link BatchSender}, which
 * keeps NOSCRIPT reloads in order, each call carrying its rule (src/redis/protocol.ts sends a
 * batch's rule once when its calls share it); key operations go alone, one script call each.
 *
 * A Redis key is the limiter's namespace (`prefix + name? + algorithm + ':'`, no rule: the state
 * records its rule) and the caller's key. On standalone servers the scripts also look, on a key's
 * first call, for what the previous version wrote under the rule's name (`split`, see
 * legacySplit); on a cluster that key is in another slot, out of reach. On a cluster a batch holds
 * keys of one hash slot, computed on the key the server sees (ioredis's `keyPrefix` included).
 */
export class RedisEngine implements StoreEngine {
  readonly store = 'Redis';
  readonly maxBatch = MAX_BATCH;
  readonly ordered: boolean;
  readonly batchesOperations = false;
  readonly joint: JointEngine;
  readonly #client: unknown;
  readonly #namespace: string;
  readonly #slotPrefix: string | undefined;
  readonly #sender: BatchSender;
  readonly #scriptClient: RedisScriptClient;
  readonly #script: LuaScript;
  readonly #split: number;
  /** What to wait for before sending, while the client's first connection is under way (see `startUp`). */
  readonly #startUp: (() => Promise<void> | undefined) | undefined;

  /** @throws TypeError for an ioredis `keyPrefix` that is no string. */
  constructor(client: unknown, scriptClient: RedisScriptClient, plan: ScriptPlan, callerClock: boolean, namespace: string) {
    this.#client = client;
    this.#namespace = namespace;
    this.ordered = scriptClient.ordered === true;
    const cluster = isClusterClient(client);
    this.#slotPrefix = cluster ? clientKeyPrefix(client) : undefined;
    this.#scriptClient = scriptClient;
    this.#script = plan.script;
    this.#split = cluster ? 0 : keyPrefixBytes(client) + legacySplit(namespace);
    this.#startUp = startUp(client);
    this.#sender = new BatchSender({ client: scriptClient, script: plan.script, namespace, split: this.#split, callerClock, startUp: this.#startUp });
    const slotPrefix = this.#slotPrefix;
    this.joint = new RedisJoint({
      client,
      scriptClient,
      script: plan.script,
      split: this.#split,
      redisKey: (key) => namespace + key,
      slot: (redisKey) => (slotPrefix === undefined ? 0 : hashSlot(slotPrefix + redisKey)),
      checkKey: (key) => this.checkKey(key),
      startUp: this.#startUp,
    });
  }

  checkKey(key: string): void {
    checkString('key', key);
  }

  group(key: string): number {
    return this.#slotPrefix === undefined ? 0 : hashSlot(this.#slotPrefix + this.#namespace + key);
  }

  send(calls: StoreCall[], flight: Flight): void {
    const [first] = calls;
    if (first!.op !== 'decide') return this.#operate(first!);
    this.#sender.send(calls, flight);
  }

  timedOut(call: StoreCall): void {
    // The layer has answered the call; the sender only lets go of what the call held back (a key
    // operation, sent alone, holds nothing).
    if (call.op === 'decide') this.#sender.timedOut(call);
  }

  timeoutError(timeoutMs: number, what?: string): Error {
    return new RedisTimeoutError(timeoutMs, what);
  }

  clientClosed(): boolean {
    return isClientClosed(this.#client);
  }

  /**
   * One key operation, alone: one script call on its key (atomic, Cluster-safe), never batched with
   * decisions. Operations are rare next to decisions: a decision in flight is not held back for
   * them, nor they for it (`await` orders them).
   */
  #operate(call: StoreCall): void {
    const { op, amount, now, rule } = call;
    // A reset is the same at any time: it reads no clock.
    const reading = op === 'reset' || now === undefined ? '' : String(now);
    // A reservation's receipt is the id it is kept under in the key, drawn here; a charge with one
    // settles that reservation above what it reserved.
    const receipt = op === 'reserve' ? receiptId() : (call.receipt as string | undefined);
    const { concurrency } = call;
    // With an in-flight limit, each call also carries it: the receipt's place held by '' when none.
    const rest =
      op === 'reset' ? [] : concurrency !== undefined ? [String(amount), receipt ?? '', String(concurrency.limit), String(concurrency.leaseMs)] : receipt === undefined ? [String(amount)] : [String(amount), receipt];
    const { keys, args } = operationArguments(this.#namespace + call.key, op as KeyOperation, reading, this.#split, rule, rest);
    const done = (reply: unknown) => {
      try {
        if (op === 'block' || op === 'reset' || op === 'extend') {
          const held = operationDone(reply, rule.limit);
          call.answer(undefined, op === 'extend' ? held : undefined);
        } else {
          const decision = operationDecision(reply, rule.limit, concurrency !== undefined);
          if (op === 'reserve' && decision.allowed) call.answer(decision, receipt);
          else call.answer(decision);
        }
      } catch (error) {
        call.fail(error);
      }
    };
    const send = () => runScript(this.#scriptClient, this.#script, keys, args, done, (error) => call.fail(error), () => {});
    const starting = this.#startUp?.();
    if (starting === undefined) send();
    // Answered by its timeout meanwhile: the caller has its answer, and a late operation would
    // still change the key (as the BatchSender drops such decisions).
    else
      void starting.then(() => {
        if (!call.answered) send();
      });
  }
}

/**
 * The bytes a standalone client puts before every key (ioredis's `keyPrefix`), which may be a
 * Buffer there: only a cluster needs it as text, for hash slots.
 */
function keyPrefixBytes(client: unknown): number {
  const keyPrefix = (client as { options?: { keyPrefix?: unknown } } | null)?.options?.keyPrefix;
  if (keyPrefix instanceof Uint8Array) return keyPrefix.byteLength;
  return legacySplit(clientKeyPrefix(client));
}
