import { checkString } from '../core/validate';
import type { Flight } from '../store/coalescer';
import type { JointEngine, StoreCall, StoreEngine } from '../store/engine';
import { BatchSender } from './batch-sender';
import { clientKeyPrefix, isClientClosed, isClusterClient, runScript, type RedisScriptClient } from './client';
import { ABSENT, CLUSTER_SPLIT, GIVEN_SPLIT, type KeyOperation, legacySplit, operationArguments, operationDecision, operationDone, ownRule, previousKeyArguments, previousRedisKey, receiptId } from './protocol';
import { RedisJoint } from './joint';
import { startUp } from './readiness';
import { provenWait } from './reply';
import { type LuaScript, PREVIOUS_KEY, type ScriptPlan } from './scripts';
import { hashSlot } from './slot';
import { RedisTimeoutError } from './timeout';

/**
 * The most decisions one script call carries. Small enough that a full batch leaves at once, beside
 * the round, instead of waiting for it, and that one script holds Redis (and its other clients)
 * only briefly; 16 beat 32 with 64 callers (bench/HISTORY.md).
 */
const MAX_BATCH = 16;

/** The flight of a batch sent outside the coalescer's rounds (calls that waited for an adoption): nothing to release. */
const UNROUNDED: Flight = { release: () => {} };

/** A call waiting for an adoption of its key (see RedisEngine's #waited). */
interface Waiting {
  readonly order: number;
  readonly call: StoreCall;
}

/** An adoption under way (see RedisEngine's #adopt): `end` lets the calls waiting for it go, once. */
class Adoption {
  #next: (() => void) | undefined;

  constructor(next: () => void) {
    this.#next = next;
  }

  readonly end = (): void => {
    const next = this.#next;
    this.#next = undefined;
    next?.();
  };
}

/**
 * Redis (and Valkey, Upstash) under the store layer: decisions go to one {@link BatchSender}, which
 * keeps NOSCRIPT reloads in order, each call carrying its rule (src/redis/protocol.ts sends a
 * batch's rule once when its calls share it); key operations go alone, one script call each.
 *
 * A Redis key is the limiter's namespace (`prefix + name? + algorithm + ':'`, no rule: the state
 * records its rule) and the caller's key. On standalone servers the scripts also look, on a key's
 * first call, for what the previous version wrote under the rule's name (`split`, see
 * legacySplit). On a cluster that key is in another slot: a call that finds its key absent is
 * answered by the engine in three steps (see #adopt). On a cluster a batch holds keys of one hash
 * slot, computed on the key the server sees (ioredis's `keyPrefix` included).
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
  readonly #previous: ScriptPlan['previous'];
  /** What to wait for before sending, while the client's first connection is under way (see `startUp`). */
  readonly #startUp: (() => Promise<void> | undefined) | undefined;
  /** On a cluster, the Redis keys being adopted (see #adopt), each with the calls on it waiting, in the order sent. */
  readonly #adopting = new Map<string, Waiting[]>();
  /** How many calls were sent: a call's place in that order. */
  #sent = 0;

  /** @throws TypeError for an ioredis `keyPrefix` that is no string. */
  constructor(client: unknown, scriptClient: RedisScriptClient, plan: ScriptPlan, callerClock: boolean, namespace: string) {
    this.#client = client;
    this.#namespace = namespace;
    this.ordered = scriptClient.ordered === true;
    const cluster = isClusterClient(client);
    this.#slotPrefix = cluster ? clientKeyPrefix(client) : undefined;
    this.#scriptClient = scriptClient;
    this.#script = plan.script;
    this.#split = cluster ? CLUSTER_SPLIT : keyPrefixBytes(client) + legacySplit(namespace);
    this.#previous = plan.previous;
    this.#startUp = startUp(client);
    this.#sender = new BatchSender({
      client: scriptClient,
      script: plan.script,
      namespace,
      split: this.#split,
      callerClock,
      startUp: this.#startUp,
      // The sender sends the layer's calls as they are: only a cluster's absent key builds its Redis key again.
      absent: (call) => this.#adopt(call as StoreCall, namespace + call.key, (call as StoreCall).order),
      // A call held back by the sender may find its key being adopted once its turn comes (only on
      // a cluster, where the call has its order).
      waits: (call) => this.#adopting.size > 0 && this.#waited(call as StoreCall, namespace + call.key, (call as StoreCall).order),
    });
    const slotPrefix = this.#slotPrefix;
    this.joint = new RedisJoint({
      client,
      scriptClient,
      script: plan.script,
      split: this.#split,
      previous: plan.previous,
      redisKey: (key) => namespace + key,
      previousKey: (call) => previousRedisKey(namespace, call.rule, call.key),
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
    if (this.#split === CLUSTER_SPLIT) {
      // Each call's place in the order sent, which an adoption keeps (see #waited); and decisions on
      // a key being adopted wait for it, so that they still decide in the order made.
      for (const call of calls) call.order = ++this.#sent;
      if (this.#adopting.size > 0) calls = calls.filter((call) => !this.#waited(call, this.#namespace + call.key, call.order));
      if (calls.length === 0) return flight.release();
    }
    this.#sender.send(calls, flight);
  }

  timedOut(call: StoreCall): void {
    // An adoption not answered in time lets the calls waiting for it go: a server that does not
    // answer holds them back no longer than the bound.
    if (call.sent instanceof Adoption) return call.sent.end();
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
   * them, nor they for it (`await` orders them). On a cluster one waits for an adoption of its key
   * under way (see #adopt).
   */
  #operate(call: StoreCall): void {
    const redisKey = this.#namespace + call.key;
    const send = () => {
      const order = ++this.#sent;
      if (!this.#waited(call, redisKey, order)) this.#alone(call, redisKey, order);
    };
    const starting = this.#startUp?.();
    if (starting === undefined) send();
    // Answered by its timeout meanwhile: the caller has its answer, and a late operation would
    // still change the key (as the BatchSender drops such decisions).
    else
      void starting.then(() => {
        if (!call.answered) send();
      });
  }

  /** Sends a call alone; on a cluster a reset first deletes the previous version's key, in its own slot. */
  #alone(call: StoreCall, redisKey: string, order: number): void {
    if (call.op !== 'reset' || this.#split !== CLUSTER_SPLIT) return this.#run(call, redisKey, order, undefined, undefined);
    // The previous key first: the other way round, a call between the two could adopt it again.
    this.#previousKey(call, 'DEL', () => this.#run(call, redisKey, order, undefined, undefined), (error) => call.fail(error));
  }

  /**
   * Sends one call alone and answers it: an operation, or a decision on a cluster. A first try that
   * finds its key absent on a cluster goes on to adopt (see #adopt). A second try (`given`: what
   * was read of the previous key, `adopted` ending the adoption once answered) that adopted the
   * previous key (neither a peek, which writes nothing, nor a failure) deletes that key before the
   * answer; should that fail, the adopted key's expiry is at least what the previous key had left,
   * so it is never adopted again.
   */
  #run(call: StoreCall, redisKey: string, order: number, given: [string, string] | undefined, adopted: (() => void) | undefined): void {
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
    const split = given === undefined ? this.#split : GIVEN_SPLIT;
    const { keys, args } = operationArguments(redisKey, op as KeyOperation, reading, split, rule, given === undefined ? rest : [...given, ...rest]);
    const done = (reply: unknown) => {
      if (reply === ABSENT && given === undefined) return this.#adopt(call, redisKey, order);
      adopted?.();
      let answer: () => void;
      try {
        if (op === 'block' || op === 'reset' || op === 'extend') {
          const held = operationDone(reply, rule.limit);
          answer = () => call.answer(undefined, op === 'extend' ? held : undefined);
        } else if (op === 'refund') {
          // Answered under the key's own rule, which the reply names when it is not the call's.
          const own = ownRule(reply);
          const decision = operationDecision(own.rest, (own.rule ?? rule).limit, concurrency !== undefined);
          answer = () => call.answer(decision, undefined, undefined, own.rule);
        } else {
          const decision = operationDecision(reply, rule.limit, concurrency !== undefined);
          if (op !== 'reserve') answer = () => call.answer(decision);
          else if (decision.allowed) answer = () => call.answer(decision, receipt);
          else {
            // A refusal of a script with leases (a string: readDecision read it) ends with its proven wait.
            const wait = concurrency === undefined ? undefined : provenWait(reply as string);
            answer = () => call.answer(decision, undefined, wait);
          }
        }
      } catch (error) {
        return call.fail(error);
      }
      // Answered once the previous key is gone, so that the caller never sees both.
      if (given !== undefined && given[1] !== '-2' && op !== 'peek') this.#previousKey(call, 'DEL', answer, answer);
      else answer();
    };
    runScript(this.#scriptClient, this.#script, keys, args, done, (error) => {
      adopted?.();
      call.fail(error);
    }, () => {});
  }

  /**
   * A call whose key a cluster found absent: the previous version's key (the rule after the
   * namespace, in another slot) is read by a script of its own, and the call goes again with what it held, which
   * the script adopts only if the key is still absent, so that two processes never adopt it twice.
   * Meanwhile the calls made on the key (or that found it absent too) wait, then go together, in
   * the order made: so they still decide in that order, and a busy key is held back for one
   * adoption, never a queue of them. Each step is sent only while the call is unanswered: its
   * timeout ends the adoption.
   */
  #adopt(call: StoreCall, redisKey: string, order: number): void {
    if (this.#waited(call, redisKey, order)) return;
    this.#adopting.set(redisKey, []);
    const adoption = new Adoption(() => {
      const waiting = this.#adopting.get(redisKey)!;
      this.#adopting.delete(redisKey);
      this.#resend(waiting, redisKey);
    });
    call.sent = adoption;
    const adopted = adoption.end;
    this.#previousKey(
      call,
      this.#previous,
      (reply) => {
        if (call.answered) return adopted();
        let given: [string, string];
        try {
          given = previousKeyArguments(reply);
        } catch (error) {
          adopted();
          return call.fail(error);
        }
        this.#run(call, redisKey, order, given, adopted);
      },
      (error) => {
        adopted();
        call.fail(error);
      },
    );
  }

  /** Runs PREVIOUS_KEY (`what` it does) on the previous version's key of `call`, named here: only a cluster's absent key needs it. */
  #previousKey(call: StoreCall, what: 'GET' | 'ZRANGE' | 'DEL', done: (reply: unknown) => void, failed: (error: unknown) => void): void {
    runScript(this.#scriptClient, PREVIOUS_KEY, [previousRedisKey(this.#namespace, call.rule, call.key)], [what], done, failed, () => {});
  }

  /**
   * True when `redisKey` is being adopted: then `call` waits for the adoption to end, and goes
   * alone. It waits in its place in the order sent (`order`): a call sent before others, beside
   * the round, may find the key absent after they were told to wait.
   */
  #waited(call: StoreCall, redisKey: string, order: number): boolean {
    const waiting = this.#adopting.get(redisKey);
    if (waiting === undefined) return false;
    let at = waiting.length;
    while (at > 0 && waiting[at - 1]!.order > order) at--;
    waiting.splice(at, 0, { order, call });
    return true;
  }

  /**
   * Sends the calls that waited for an adoption of `redisKey`, in their order: each run of
   * decisions as batches of at most MAX_BATCH (as the coalescer sends them), each operation alone.
   * One script call per waiting call would put dozens on the wire at once, and a client may not
   * keep so many in order: Valkey GLIDE runs a hundred commands sent together in another order.
   * A call answered by its timeout meanwhile is not sent, as the BatchSender drops such calls.
   */
  #resend(waiting: readonly Waiting[], redisKey: string): void {
    let batch: StoreCall[] = [];
    const flush = () => {
      if (batch.length > 0) this.#sender.send(batch, UNROUNDED);
      batch = [];
    };
    for (const { order, call } of waiting) {
      if (call.answered) continue;
      if (call.op !== 'decide') {
        flush();
        this.#alone(call, redisKey, order);
        continue;
      }
      batch.push(call);
      if (batch.length === MAX_BATCH) flush();
    }
    flush();
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
