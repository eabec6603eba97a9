import type { Clock } from '../core/clock';
import { rangeError } from '../core/errors';
import { describe } from '../core/validate';
import type { Rule } from '../core/rule';
import { type RedisScriptClient, runScript } from './client';
import { type KeyOperation, operationArguments } from './protocol';
import type { LuaScript } from './scripts';
import { RedisTimeoutError } from './timeout';

/** What {@link KeyOperations} needs of its limiter. */
export interface KeyOperationsOptions {
  readonly client: RedisScriptClient;
  readonly script: LuaScript;
  /** Where the previous version's key names put the rule (see `legacySplit`); 0 for nowhere. */
  readonly split: number;
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
   * Runs `operation` on `redisKey` under `rule` at `reading` (from {@link reading}; '' for a reset,
   * the same at any time) with its arguments, and resolves with the script's reply; rejects with the
   * client's error or a `RedisTimeoutError`.
   */
  run(redisKey: string, operation: KeyOperation, reading: string, rule: Rule, rest: readonly string[]): Promise<unknown> {
    const { client, script, split, timeoutMs, startUp } = this.#options;
    const { keys, args } = operationArguments(redisKey, operation, reading, split, rule, rest);
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
          keys,
          args,
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
}
