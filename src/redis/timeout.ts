/**
 * The error an outage hook receives when Redis did not answer within `timeoutMs`; the decision is
 * then marked `degraded: 'store-timeout'`.
 *
 * @example
 * ```ts
 * import { RedisTimeoutError } from 'ratekeeper/redis';
 * const onError = (error: unknown) => {
 *   if (error instanceof RedisTimeoutError) console.warn(`Redis slower than ${error.timeoutMs} ms`);
 * };
 * ```
 */
export class RedisTimeoutError extends Error {
  override readonly name = 'RedisTimeoutError';
  /** The bound that was exceeded. */
  readonly timeoutMs: number;

  constructor(timeoutMs: number) {
    super(`ratekeeper: Redis did not answer within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

interface Pending {
  readonly deadline: number;
  /** Cleared once the call settles, so a settled call is never failed and can be dropped. */
  fail: ((error: RedisTimeoutError) => void) | undefined;
}

/**
 * Bounds calls to `timeoutMs` each. A client that queues commands while offline, or a frozen
 * server, would otherwise hold the caller for as long as the client likes.
 *
 * Every call gets the same bound, so deadlines come in the order calls start: one timer, armed for
 * the oldest pending call, serves them all, and a call costs a queue entry instead of a timer of
 * its own (which is measurable at tens of thousands of decisions per second).
 */
export class Timeouts {
  readonly #timeoutMs: number;
  readonly #pending: Pending[] = [];
  /** Index of the oldest entry still in `#pending`; the ones before it are spent. */
  #head = 0;
  #armed = false;

  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Settles like `promise`, or rejects with a `RedisTimeoutError` once `timeoutMs` has passed. A late
   * answer is dropped; a late failure is handled here, so it never becomes an unhandled rejection.
   */
  bound<T>(promise: Promise<T>): Promise<T> {
    if (this.#timeoutMs === Infinity) return promise;
    return new Promise<T>((resolve, reject) => {
      const pending: Pending = { deadline: performance.now() + this.#timeoutMs, fail: reject };
      this.#add(pending);
      promise.then(
        (value) => {
          pending.fail = undefined;
          resolve(value);
        },
        (error: unknown) => {
          pending.fail = undefined;
          reject(error);
        },
      );
    });
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
    for (; this.#head < queue.length; this.#head++) {
      const pending = queue[this.#head]!;
      if (pending.fail === undefined) continue;
      if (pending.deadline > now) {
        this.#arm(pending.deadline - now);
        return;
      }
      pending.fail(new RedisTimeoutError(this.#timeoutMs));
      pending.fail = undefined;
    }
    queue.length = 0;
    this.#head = 0;
  };
}
