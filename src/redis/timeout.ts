/**
 * The error an outage hook receives when Redis did not answer within `timeoutMs`; the decision is
 * then marked `degraded: 'store-timeout'`. Tell it by its `code`, which holds across the ESM and
 * CommonJS copies of ratekeeper (`instanceof` does not).
 *
 * @example
 * ```ts
 * import type { RedisTimeoutError } from 'ratekeeper/redis';
 * const onError = (error: unknown) => {
 *   const e = error as Partial<RedisTimeoutError> | null;
 *   if (e?.code === 'ERR_RATEKEEPER_STORE_TIMEOUT') console.warn(`Redis slower than ${e.timeoutMs} ms`);
 * };
 * ```
 */
export class RedisTimeoutError extends Error {
  override readonly name = 'RedisTimeoutError';
  readonly code = 'ERR_RATEKEEPER_STORE_TIMEOUT';
  /** The bound that was exceeded. */
  readonly timeoutMs: number;

  constructor(timeoutMs: number, what = 'Redis') {
    super(`ratekeeper: ${what} did not answer within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/** One call's deadline; {@link Deadline.settle} says whether the call may still answer. */
export interface Deadline {
  /** Claims the answer for the call: true the first time, false once the timeout has answered instead. */
  settle(): boolean;
  /** True until the call is answered or has timed out. */
  readonly open: boolean;
}

class Pending implements Deadline {
  readonly deadline: number;
  /** Cleared once the call settles or times out, so each call is answered once. */
  fail: ((error: Error) => void) | undefined;

  constructor(deadline: number, fail: (error: Error) => void) {
    this.deadline = deadline;
    this.fail = fail;
  }

  settle(): boolean {
    if (this.fail === undefined) return false;
    this.fail = undefined;
    return true;
  }

  get open(): boolean {
    return this.fail !== undefined;
  }
}

const UNBOUNDED: Deadline = { settle: () => true, open: true };

/**
 * Bounds calls to `timeoutMs` each. A client that queues commands while offline, or a frozen
 * server, would otherwise hold the caller for as long as the client likes.
 *
 * Every call gets the same bound, so deadlines come in the order calls start: one timer, armed for
 * the oldest pending call, serves them all, and a call costs a queue entry instead of a timer of
 * its own (which is measurable at tens of thousands of decisions per second). Callbacks rather
 * than a promise wrapped around the call's promise save a promise and a microtask per call.
 */
export class Timeouts {
  readonly #timeoutMs: number;
  readonly #timeoutError: (timeoutMs: number) => Error;
  readonly #pending: Pending[] = [];
  /** Index of the oldest entry still in `#pending`; the ones before it are spent. */
  #head = 0;
  #armed = false;

  /** @param timeoutError the error a call that timed out fails with (the store's own class). */
  constructor(timeoutMs: number, timeoutError: (timeoutMs: number) => Error = (ms) => new RedisTimeoutError(ms)) {
    this.#timeoutMs = timeoutMs;
    this.#timeoutError = timeoutError;
  }

  /**
   * Starts a call's clock: `fail` receives the timeout error (a `RedisTimeoutError` by default)
   * once `timeoutMs` has passed, unless the call claims its answer with `settle()` first. A late
   * answer finds `settle()` false and is dropped.
   */
  start(fail: (error: Error) => void): Deadline {
    if (this.#timeoutMs === Infinity) return UNBOUNDED;
    const pending = new Pending(performance.now() + this.#timeoutMs, fail);
    this.#add(pending);
    return pending;
  }
  #add(pending: Pending): void {
    const queue = this.#pending;
    while (this.#head < queue.length && queue[this.#head]!.fail === undefined) this.#head++;
    if (this.#head === queue.length) {
      queue.length = 0;
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= queue.length) {
      queue.splice(0, this.#head);
      this.#head = 0;
    }
    queue.push(pending);
    if (!this.#armed) this.#arm(this.#timeoutMs);
  }

  #arm(delayMs: number): void {
    this.#armed = true;
    const timer = setTimeout(this.#expire, delayMs);
    // The timer only bounds calls that something else (a socket) already keeps alive.
    (timer as { unref?: () => void }).unref?.();
  }

  readonly #expire = (): void => {
    this.#armed = false;
    const queue = this.#pending;
    const now = performance.now();
    // Failing runs the caller's code (the outage policy, onError), which may start new calls; the
    // queue is left consistent before any of it runs.
    const expired: ((error: Error) => void)[] = [];
    for (; this.#head < queue.length; this.#head++) {
      const pending = queue[this.#head]!;
      if (pending.fail === undefined) continue;
      if (pending.deadline > now) {
        this.#arm(pending.deadline - now);
        break;
      }
      expired.push(pending.fail);
      pending.fail = undefined;
    }
    if (this.#head === queue.length) {
      queue.length = 0;
      this.#head = 0;
    }
    for (const fail of expired) fail(this.#timeoutError(this.#timeoutMs));
  };
}
