import type { Clock } from '../core/clock';
import type { Decision } from '../core/decision';
import { rangeError } from '../core/errors';
import { describe } from '../core/validate';
import { type RedisScriptClient, runScript } from './client';
import { readDecision, unexpectedReply } from './reply';
import type { LuaScript } from './scripts';
import { RedisTimeoutError } from './timeout';

/** What a limiter's script does to one key besides deciding (see batchScript). */
export type KeyOperation = 'peek' | 'reserve' | 'charge' | 'refund' | 'block' | 'reset';

/** What a reservation's refund needs, as the script gave it: its numbers as text, so they go back exact. */
export type RedisReceipt = readonly string[];

/** What {@link KeyOperations} needs of its limiter. */
export interface KeyOperationsOptions {
  readonly client: RedisScriptClient;
  readonly script: LuaScript;
  readonly ruleArgs: readonly string[];
  readonly limit: number;
  /** The limiter's clock; undefined when the server's decides. */
  readonly clock: Clock | undefined;
  readonly timeoutMs: number;
  /** What to wait for before sending, while the client's first connection is under way (see `startUp`). */
  readonly startUp: (() => Promise<void> | undefined) | undefined;
}

/**
 * Sends the operations on one key: each is one script call of its own, on one key (so it is
 * atomic and Cluster-safe), never batched with decisions, timed by the server's clock unless the
 * limiter has its own, and bounded by `timeoutMs`. Operations are rare next to decisions: a timer
 * each costs nothing that matters, and a decision in flight is not held back for them, nor they
 * for it (`await` orders them).
 */
export class KeyOperations {
  readonly #options: KeyOperationsOptions;

  constructor(options: KeyOperationsOptions) {
    this.#options = options;
  }

  /**
   * The limiter's clock reading for an operation, as text; '' when the server's clock decides.
   * @throws RangeError when the clock reads no finite number.
   */
  reading(): string {
    const { clock } = this.#options;
    if (clock === undefined) return '';
    const now = clock.now();
    // NaN sent to Redis would come back as a NaN time.
    if (!Number.isFinite(now)) throw rangeError(`ratekeeper: \`clock\` returned ${describe(now)}, not a finite number`);
    return String(now);
  }

  /**
   * Runs `operation` on `redisKey` at `reading` (from {@link reading}; '' for a reset, the same at
   * any time) with its arguments, and resolves with the script's reply; rejects with the client's
   * error or a `RedisTimeoutError`.
   */
  run(redisKey: string, operation: KeyOperation, reading: string, args: readonly string[]): Promise<unknown> {
    const { client, script, ruleArgs, timeoutMs, startUp } = this.#options;
    return new Promise((resolve, reject) => {
      let pending = true;
      const timer = timeoutMs === Infinity ? undefined : setTimeout(() => answer(() => reject(new RedisTimeoutError(timeoutMs))), timeoutMs);
      (timer as { unref?: () => void } | undefined)?.unref?.();
      const answer = (settle: () => void) => {
        if (!pending) return;
        pending = false;
        clearTimeout(timer);
        settle();
      };
      const send = () =>
        runScript(
          client,
          script,
          [redisKey],
          [...ruleArgs, operation, reading, ...args],
          (reply) => answer(() => resolve(reply)),
          (error) => answer(() => reject(error)),
          () => {},
        );
      const starting = startUp?.();
      if (starting === undefined) send();
      else
        void starting.then(() => {
          // Timed out meanwhile: the caller has its answer, and a late operation would only spend.
          if (pending) send();
        });
    });
  }

  /** The decision an operation replied, or (thrown) the error of its key. */
  decision(reply: unknown): Decision {
    const result = readDecision(reply, this.#options.limit);
    if (result instanceof Error) throw result;
    return result;
  }

  /** A reservation's reply: its decision and, when granted, its receipt; or (thrown) the error of its key. */
  reservation(reply: unknown): { decision: Decision; receipt: RedisReceipt | undefined } {
    if (!Array.isArray(reply)) throw typeof reply === 'string' && reply.startsWith('E ') ? this.#keyError(reply) : unexpectedReply(reply);
    const decision = this.decision(reply[0]);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt = typeof reply[1] === 'string' ? reply[1].split(' ') : [];
    if (receipt.length !== 4 || !receipt.every((n) => Number.isFinite(Number(n)))) throw unexpectedReply(reply);
    return { decision, receipt };
  }

  /** Checks the reply of an operation that answers nothing ('OK'). */
  done(reply: unknown): void {
    if (reply === 'OK') return;
    throw typeof reply === 'string' && reply.startsWith('E ') ? this.#keyError(reply) : unexpectedReply(reply);
  }

  #keyError(reply: string): Error {
    return readDecision(reply, this.#options.limit) as Error;
  }
}
