import type { Decision } from '../core/decision';
import { type RedisScriptClient, runScript } from './client';
import type { RefusalCache } from './refusal-cache';
import { readReply } from './reply';
import type { ScriptPlan } from './scripts';
import type { Deadline, Timeouts } from './timeout';

/** One decision on its way to Redis. */
export interface Call {
  readonly key: string;
  readonly redisKey: string;
  readonly permits: number;
  /** The limiter's clock reading when the call was made. */
  readonly now: number;
  readonly resolve: (decision: Decision | Promise<Decision>) => void;
  readonly reject: (error: unknown) => void;
}

/** One script call: its calls, their deadline, and whether it counts as in flight. */
interface Flight {
  readonly calls: Call[];
  deadline: Deadline;
  counted: boolean;
}

/** What a {@link BatchSender} needs of its limiter. */
export interface SenderOptions {
  readonly client: RedisScriptClient;
  readonly plan: ScriptPlan;
  readonly ruleArgs: readonly string[];
  readonly limit: number;
  /** Whether the limiter's own clock decides; otherwise the server's. */
  readonly callerClock: boolean;
  readonly timeouts: Timeouts;
  readonly refusals: RefusalCache | undefined;
  /** Answers one call from the outage policy, after reporting `error`. */
  readonly fallback: (error: unknown, call: Call) => Decision | Promise<Decision>;
}

/**
 * Sends calls as one script call and answers each of them: with its own decision from the reply,
 * or, when the script call fails or times out, with the outage policy's answer for its own key and
 * permits. The calls of one script call started in the same tick, so one deadline bounds them all.
 *
 * Script calls leave in the order made, so calls on one key run in that order. A NOSCRIPT reply
 * (the server lost its script cache) breaks that: the failed call goes again with EVAL, and by
 * then the script may be loaded, so a call made meanwhile would run first. So from a NOSCRIPT
 * reply until every script call then in flight has been answered (or has timed out), new calls are
 * held back, then sent in order.
 */
export class BatchSender {
  readonly #options: SenderOptions;
  /** Script calls sent and not yet answered nor timed out. */
  #inFlight = 0;
  /** Script calls held back while a reload is under way, in the order made. */
  #held: Flight[] | undefined;

  constructor(options: SenderOptions) {
    this.#options = options;
  }

  readonly send = (calls: Call[]): void => {
    // The deadline starts now, so a call held back during a reload is still bounded from its start.
    const flight: Flight = { calls, deadline: undefined!, counted: false };
    flight.deadline = this.#options.timeouts.start((error) => {
      this.#fail(calls, error);
      this.#finish(flight);
    });
    if (this.#held !== undefined) this.#held.push(flight);
    else this.#run(flight);
  };

  #run(flight: Flight): void {
    const { client, plan, ruleArgs, callerClock } = this.#options;
    const { calls, deadline } = flight;
    const keys: string[] = [];
    const args = ruleArgs.slice();
    // Permits that are all 1 are left out when the server's clock decides (see batchScript).
    let leaveOut = !callerClock;
    for (const call of calls) {
      keys.push(call.redisKey);
      if (call.permits !== 1) leaveOut = false;
    }
    if (!leaveOut) for (const call of calls) args.push(String(call.permits));
    if (callerClock) for (const call of calls) args.push(String(call.now));
    flight.counted = true;
    this.#inFlight++;
    runScript(
      client,
      plan.script,
      keys,
      args,
      (reply) => {
        if (deadline.settle()) this.#settle(calls, reply);
        this.#finish(flight);
      },
      (error) => {
        if (deadline.settle()) this.#fail(calls, error);
        this.#finish(flight);
      },
      () => {
        this.#held ??= [];
      },
    );
  }

  /** A script call was answered or timed out; the last one in flight ends a reload. */
  #finish(flight: Flight): void {
    if (!flight.counted) return;
    flight.counted = false;
    if (--this.#inFlight === 0 && this.#held !== undefined) {
      const held = this.#held;
      this.#held = undefined;
      // Calls whose deadline passed while held were answered by the policy: sending them would only spend.
      for (const waiting of held) if (waiting.deadline.open) this.#run(waiting);
    }
  }

  #settle(calls: Call[], reply: unknown): void {
    const { limit, refusals, fallback } = this.#options;
    let results: (Decision | Error)[];
    try {
      results = readReply(reply, calls.length, limit);
    } catch (error) {
      this.#fail(calls, error);
      return;
    }
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i]!;
      const result = results[i]!;
      if (result instanceof Error) {
        // This key's decision failed inside the script (say, the key holds a list); the other
        // decisions of the batch stand.
        call.resolve(fallback(result, call));
        continue;
      }
      if (!result.allowed) refusals?.remember(call.key, call.permits, call.now, result);
      call.resolve(result);
    }
  }

  #fail(calls: Call[], error: unknown): void {
    for (const call of calls) call.resolve(this.#options.fallback(error, call));
  }
}
