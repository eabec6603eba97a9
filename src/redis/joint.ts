import { unexpectedReply } from '../store/reply';
import type { JointEngine, StoreCall } from '../store/engine';
import { runScript, type RedisScriptClient } from './client';
import { admitScript } from './lua/admit';
import { ABSENT, CLUSTER_SPLIT, GIVEN_SPLIT, operationArguments, operationDecision, previousKeyArguments, receiptId } from './protocol';
import { readDecision } from './reply';
import { type LuaScript, PREVIOUS_KEY, type ScriptPlan, script } from './scripts';

/** One reservation as the admission script carries it: plain data, so that another copy of the library can send it. */
interface JointReservation {
  readonly redisKey: string;
  readonly script: LuaScript;
  readonly args: readonly string[];
  readonly receipt: string;
  /** On a cluster, the previous version's key ('' elsewhere) and how PREVIOUS_KEY reads it. */
  readonly previousKey: string;
  readonly previous: ScriptPlan['previous'];
}

/** What {@link RedisJoint} needs of its engine. */
export interface JointOptions {
  readonly client: unknown;
  readonly scriptClient: RedisScriptClient;
  readonly script: LuaScript;
  readonly split: number;
  readonly previous: ScriptPlan['previous'];
  /** The Redis key of a caller's key. */
  readonly redisKey: (key: string) => string;
  /** The previous version's Redis key of a call's key (see previousRedisKey). */
  readonly previousKey: (call: StoreCall) => string;
  /** The hash slot of a Redis key, 0 on one server. */
  readonly slot: (redisKey: string) => number;
  readonly checkKey: (key: string) => void;
  readonly startUp: (() => Promise<void> | undefined) | undefined;
}

/**
 * The error of a server that does not run a command the admission script needs (`DUMP` or
 * `RESTORE` renamed away, an ACL without them, a provider that leaves them out).
 */
const UNSUPPORTED = /unknown (redis )?command|NOPERM/i;

/** Clients whose server failed the script so: their admissions go in order (every limiter on them alike). */
const unsupported = new WeakSet<object>();

/**
 * An admission's reservations on one Redis client and hash slot as one script call (see
 * src/redis/lua/admit.ts), atomic: all granted, or none. A reply the script gives for every part
 * answers each call (a grant with its receipt, so that it settles as any reservation does); a
 * failure of the call (the client's error, a timeout, a key holding what is no state of ours) is
 * every part's failure, each then answered by its own limiter's outage policy. A server that does
 * not run `DUMP` or `RESTORE` fails the script so once: later admissions on it go in order.
 */
export class RedisJoint implements JointEngine {
  readonly together: unknown;
  readonly #options: JointOptions;

  constructor(options: JointOptions) {
    this.#options = options;
    this.together = options.client;
  }

  slot(key: string): number {
    if (unsupported.has(this.together as object)) throw new Error('ratekeeper: this server does not run the admission script');
    this.#options.checkKey(key);
    return this.#options.slot(this.#options.redisKey(key));
  }

  prepare(call: StoreCall): JointReservation {
    const { now, rule, amount } = call;
    const receipt = receiptId();
    const redisKey = this.#options.redisKey(call.key);
    const { args } = operationArguments(redisKey, 'reserve', now === undefined ? '' : String(now), this.#options.split, rule, [String(amount), receipt]);
    return { redisKey, script: this.#options.script, args, receipt, previousKey: this.#options.split === CLUSTER_SPLIT ? this.#options.previousKey(call) : '', previous: this.#options.previous };
  }

  send(calls: readonly StoreCall[], prepared: readonly unknown[]): void {
    this.#send(calls, prepared as readonly JointReservation[], undefined);
  }

  /**
   * Sends the admission script; `given` (a cluster's second try) is what was read of each part's
   * previous key. On a cluster a part whose key is absent answers {@link ABSENT} (its previous key
   * is in another slot): then each part's previous key is read, in its own slot, and the admission
   * goes again with what they held, adopted by a part only if its key is still absent (as the
   * engine's #adopt does for one call). The previous keys adopted are deleted before the answer:
   * those of every part when all are granted, else the refusing part's (the others were given back).
   */
  #send(calls: readonly StoreCall[], parts: readonly JointReservation[], given: readonly (readonly [string, string])[] | undefined): void {
    // In one order whatever the parts' order: one admission script per mix of scripts.
    const scripts = [...new Set(parts.map((part) => part.script))].sort((a, b) => (a.sha1 < b.sha1 ? -1 : 1));
    const keys: string[] = [];
    const args: string[] = [];
    parts.forEach((part, i) => {
      // A reservation's arguments: 'reserve', reading, split, limit, windowMs, then permits and receipt.
      const own = given === undefined ? part.args : [...part.args.slice(0, 2), String(GIVEN_SPLIT), ...part.args.slice(3, 5), ...given[i]!, ...part.args.slice(5)];
      keys.push(part.redisKey);
      args.push(String(scripts.indexOf(part.script) + 1), String(own.length), ...own);
    });
    const lua = admission(scripts);
    const answer = (reply: unknown) => {
      if (given === undefined && this.#options.split === CLUSTER_SPLIT && (reply === ABSENT || (Array.isArray(reply) && reply.includes(ABSENT)))) return this.#adopt(calls, parts);
      if (!Array.isArray(reply) || reply.length !== calls.length) {
        const error = typeof reply === 'string' && reply.startsWith('E ') ? (readDecision(reply, 0) as Error) : unexpectedReply(reply, 'Redis');
        for (const call of calls) call.fail(error);
        return;
      }
      const granted = reply.every((entry) => typeof entry === 'string' && entry.startsWith('A '));
      const entries = reply as unknown[];
      const settle = () => {
        for (let i = 0; i < calls.length; i++) {
          const call = calls[i]!;
          try {
            const decision = operationDecision(entries[i], call.rule.limit);
            // Refused, the script gave back what it granted: those parts hold nothing to settle.
            if (granted) call.answer(decision, parts[i]!.receipt);
            else call.answer(decision);
          } catch (error) {
            call.fail(error);
          }
        }
      };
      if (given === undefined) return settle();
      const refusing = entries.findIndex((entry) => typeof entry === 'string' && entry.startsWith('R '));
      const adopted = parts.filter((_, i) => given[i]![1] !== '-2' && (granted || i === refusing));
      // Answered once the previous keys are gone, so that the caller never sees both.
      let left = adopted.length;
      if (left === 0) return settle();
      for (const part of adopted) this.#previousKey(part, 'DEL', () => --left === 0 && settle(), () => --left === 0 && settle());
    };
    const failed = (error: unknown) => {
      // The script cannot run here: later admissions go in order. This one is answered as any
      // failed call (what the script wrote before the command it lacked stays spent).
      if (UNSUPPORTED.test(String((error as Error | undefined)?.message))) unsupported.add(this.together as object);
      for (const call of calls) call.fail(error);
    };
    const { scriptClient, startUp } = this.#options;
    const go = () => runScript(scriptClient, lua, keys, args, answer, failed, () => {});
    const starting = given === undefined ? startUp?.() : undefined;
    if (starting === undefined) go();
    else void starting.then(go);
  }

  /** Reads every part's previous key (a cluster found a part's key absent), then sends the admission again with them. */
  #adopt(calls: readonly StoreCall[], parts: readonly JointReservation[]): void {
    const given: [string, string][] = [];
    let left = parts.length;
    let failure: { error: unknown } | undefined;
    parts.forEach((part, i) => {
      const end = () => {
        if (--left > 0) return;
        if (failure === undefined) this.#send(calls, parts, given);
        else for (const call of calls) call.fail(failure.error);
      };
      this.#previousKey(
        part,
        part.previous,
        (reply) => {
          try {
            given[i] = previousKeyArguments(reply);
          } catch (error) {
            failure ??= { error };
          }
          end();
        },
        (error) => {
          failure ??= { error };
          end();
        },
      );
    });
  }

  /** Runs PREVIOUS_KEY (`what` it does) on a part's previous version's key. */
  #previousKey(part: JointReservation, what: 'GET' | 'ZRANGE' | 'DEL', done: (reply: unknown) => void, failed: (error: unknown) => void): void {
    runScript(this.#options.scriptClient, PREVIOUS_KEY, [part.previousKey], [what], done, failed, () => {});
  }
}

/** The admission script of each mix of scripts met (algorithms, and what else a limiter's script holds). */
const admissions = new Map<string, LuaScript>();

function admission(scripts: readonly LuaScript[]): LuaScript {
  const id = scripts.map((one) => one.sha1).join(' ');
  let lua = admissions.get(id);
  if (lua === undefined) {
    lua = script(admitScript(scripts.map((one) => one.source)));
    admissions.set(id, lua);
  }
  return lua;
}
