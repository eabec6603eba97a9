import type { Decision } from '../core/decision';
import { type RedisScriptClient, runScript } from './client';
import type { Flight as InFlight } from '../store/coalescer';
import { ABSENT, batchArguments, batchDecisions, type BatchCall } from './protocol';
import type { LuaScript } from './scripts';

/**
 * One decision on its way to Redis, from the moment it was asked for until it is answered: the
 * store layer's call itself (a StoreCall), so that sending it allocates nothing per call.
 */
export interface Call extends BatchCall {
  /** Set once the call has its answer: from the sender, or from its timeout. */
  readonly answered: boolean;
  /** Answers the call with its decision (and marks it answered). */
  answer(decision: Decision): void;
  /** Answers the call as failed, the outage policy's turn (and marks it answered). */
  fail(error: unknown): void;
  /** The call's script call once handed to the sender (a ScriptCall), finished early if the call times out first. */
  sent: unknown;
}

/** One script call: its calls, the coalescer's turn for it, and whether it counts as in flight. */
interface ScriptCall {
  /** Its calls; those answered while it was held back are left out when it is sent. */
  calls: Call[];
  readonly flight: InFlight;
  counted: boolean;
}

/** What a {@link BatchSender} needs of its limiter. */
export interface SenderOptions {
  readonly client: RedisScriptClient;
  readonly script: LuaScript;
  /** What each call's key is prefixed with in Redis (see RedisEngine). */
  readonly namespace: string;
  /** Where the previous version's key names put the rule (see `legacySplit`); `CLUSTER_SPLIT` on a cluster. */
  readonly split: number;
  /** Whether the limiter's own clock decides; otherwise the server's. */
  readonly callerClock: boolean;
  /** What to wait for before sending, while the client's first connection is under way (see `startUp`). */
  readonly startUp: (() => Promise<void> | undefined) | undefined;
  /** Takes a call whose key the script found absent on a cluster, unanswered (see RedisEngine's #adopt). */
  readonly absent: (call: Call) => void;
  /**
   * True when a call held back must wait for something else first (on a cluster, an adoption of its
   * key begun meanwhile): the engine then has it, and it is not sent here.
   */
  readonly waits: (call: Call) => boolean;
}

/**
 * Sends calls as one script call and answers each of them: with its own decision from the reply,
 * or, when the script call fails, as failed. A call whose own deadline passed first was answered
 * by the layer (see {@link timedOut}); the reply's decision for it is dropped.
 *
 * Script calls leave in the order made, so calls on one key run in that order. A NOSCRIPT reply
 * (the server lost its script cache) breaks that: the failed call goes again with EVAL, and by
 * then the script may be loaded, so a call made meanwhile would run first. So from a NOSCRIPT
 * reply until every script call then in flight has been answered (or one of its calls has timed
 * out), new script calls are held back, then sent in order.
 *
 * A client that may run script calls sent together in another order (not `ordered`: an HTTP client,
 * Valkey GLIDE with many commands in flight) gets at most one script call in flight per key: one
 * that carries a key of a script call in flight (or held back before it) waits for that one to be
 * answered or time out, then goes in its turn. Script calls on other keys go at once.
 */
export class BatchSender {
  readonly #options: SenderOptions;
  /** Script calls sent and not yet answered nor timed out. */
  #inFlight = 0;
  /** Script calls held back while a reload is under way, in the order made. */
  #held: ScriptCall[] | undefined;
  /**
   * Over a client that is not `ordered`: how many calls in flight each key has. Keyed by the
   * caller's key: every call here shares the namespace, so no Redis key is built to count it.
   */
  readonly #busy = new Map<string, number>();
  /** Over a client that is not `ordered`: script calls waiting for a key of theirs in flight, in the order made. */
  #queued: ScriptCall[] = [];
  /** How many calls of the queued script calls each key has: a later script call on one waits behind them. */
  readonly #queuedKeys = new Map<string, number>();

  constructor(options: SenderOptions) {
    this.#options = options;
  }

  /** Sends `calls` as one script call; `flight` is released once the reply or the failure is handled. */
  readonly send = (calls: Call[], flight: InFlight): void => {
    const script: ScriptCall = { calls, flight, counted: false };
    for (const call of calls) call.sent = script;
    if (this.#held !== undefined) this.#held.push(script);
    else this.#run(script);
  };

  /**
   * A call whose deadline passed (answered already): its script call, if sent, stops holding
   * anything back, so a server that does not answer holds the next round, or the calls held during
   * a reload, back no longer than the bound.
   */
  readonly timedOut = (call: Call): void => {
    const script = call.sent as ScriptCall | undefined;
    if (script === undefined) return;
    script.flight.release();
    this.#finish(script);
  };

  #run(script: ScriptCall): void {
    const { client, script: lua, namespace, split, callerClock, startUp } = this.#options;
    const starting = startUp?.();
    if (starting !== undefined) {
      // The calls go, in the order made, once the attempt has ended.
      void starting.then(() => this.#resume(script));
      return;
    }
    const { calls, flight } = script;
    if (client.ordered !== true) {
      if (calls.some((call) => this.#busy.has(call.key) || this.#queuedKeys.has(call.key))) {
        this.#queued.push(script);
        for (const call of calls) count(this.#queuedKeys, call.key, 1);
        return;
      }
      for (const call of calls) count(this.#busy, call.key, 1);
    }
    const { keys, args } = batchArguments(calls, namespace, split, callerClock);
    script.counted = true;
    this.#inFlight++;
    runScript(
      client,
      lua,
      keys,
      args,
      (reply) => {
        this.#settle(calls, reply);
        flight.release();
        this.#finish(script);
      },
      (error) => {
        this.#fail(calls, error);
        flight.release();
        this.#finish(script);
      },
      () => {
        this.#held ??= [];
      },
    );
  }

  /** A script call was answered or one of its calls timed out; the last one in flight ends a reload. */
  #finish(script: ScriptCall): void {
    if (!script.counted) return;
    script.counted = false;
    if (this.#options.client.ordered !== true) this.#unblock(script);
    if (--this.#inFlight === 0 && this.#held !== undefined) {
      const held = this.#held;
      this.#held = undefined;
      for (const waiting of held) this.#resume(waiting);
    }
  }

  /** A script call's keys are no longer in flight: the queued script calls whose keys are all free go, in order. */
  #unblock(script: ScriptCall): void {
    for (const call of script.calls) count(this.#busy, call.key, -1);
    // Only a script call on a key let go here can have become free.
    if (!script.calls.some((call) => this.#queuedKeys.has(call.key))) return;
    const queued = this.#queued;
    this.#queued = [];
    this.#queuedKeys.clear();
    // Each goes again through #run, which queues it anew behind those queued again before it.
    for (const waiting of queued) this.#resume(waiting);
  }

  /**
   * Sends a script call that was held back, less its calls whose deadline passed meanwhile (the
   * layer answered those by the policy, which released the flight, and sending them would only
   * spend) and those that must now wait elsewhere (see `waits`).
   */
  #resume(script: ScriptCall): void {
    script.calls = script.calls.filter((call) => !call.answered && !this.#options.waits(call));
    if (script.calls.length > 0) this.#run(script);
    else script.flight.release();
  }

  #settle(calls: Call[], reply: unknown): void {
    let results: ReturnType<typeof batchDecisions>;
    try {
      results = batchDecisions(reply, calls);
    } catch (error) {
      this.#fail(calls, error);
      return;
    }
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i]!;
      if (call.answered) continue;
      const result = results[i]!;
      if (result === ABSENT) {
        // The script found the key absent on a cluster (see `CLUSTER_SPLIT`): the engine's turn,
        // the call no longer this script call's (its timeout releases nothing here).
        call.sent = undefined;
        this.#options.absent(call);
        continue;
      }
      // An error is this key's decision failing inside the script (say, the key holds a list);
      // the other decisions of the batch stand.
      if (result instanceof Error) call.fail(result);
      else call.answer(result);
    }
  }

  #fail(calls: Call[], error: unknown): void {
    for (const call of calls) if (!call.answered) call.fail(error);
  }
}

/** Adds `by` to `key`'s count, deleting it at 0. */
function count(counts: Map<string, number>, key: string, by: number): void {
  const n = (counts.get(key) ?? 0) + by;
  if (n === 0) counts.delete(key);
  else counts.set(key, n);
}
