/**
 * What every store's timeout error shares: the code, which holds across the ESM and CommonJS copies
 * of ratekeeper (`instanceof` does not), and the bound that was exceeded. Each store names its own
 * subclass (`RedisTimeoutError`, `PostgresTimeoutError`), so `name` says which store was slow.
 */
export abstract class StoreTimeoutError extends Error {
  readonly code = 'ERR_RATEKEEPER_STORE_TIMEOUT';
  /** The bound that was exceeded. */
  readonly timeoutMs: number;

  /** @param what what did not answer: the store, a fallback limiter, a rule function. */
  constructor(timeoutMs: number, what: string, cause?: unknown) {
    super(`ratekeeper: ${what} did not answer within ${timeoutMs} ms`, cause === undefined ? undefined : { cause });
    this.timeoutMs = timeoutMs;
  }
}

/** A call {@link CallTimeouts} bounds: its deadline, and whether it has its answer yet. */
export interface Bounded {
  /** `performance.now()` reading after which the call times out; Infinity for never. */
  readonly deadline: number;
  /** Set once the call is answered, by its reply, its failure or its timeout: each call is answered once. */
  answered: boolean;
}

/**
 * Bounds calls to `timeoutMs` each, counted from each call's own start. A client that queues
 * commands while offline, or a frozen server, would otherwise hold the caller for as long as the
 * client likes.
 *
 * Every call gets the same bound, so deadlines come in the order calls start: one timer, armed for
 * the oldest unanswered call, serves them all, and a call costs a queue entry instead of a timer of
 * its own (which is measurable at tens of thousands of decisions per second). The call itself is
 * the entry, so bounding it allocates nothing.
 */
export class CallTimeouts<T extends Bounded> {
  readonly #timeoutMs: number;
  readonly #timedOut: (call: T, error: Error) => void;
  readonly #timeoutError: (timeoutMs: number) => Error;
  readonly #pending: T[] = [];
  /** Index of the oldest entry still in `#pending`; the ones before it are spent. */
  #head = 0;
  #armed = false;

  /**
   * `timedOut` answers a call whose bound passed, with the timeout error (the store's own class:
   * a `RedisTimeoutError`, a `PostgresTimeoutError`); the call is marked answered first.
   */
  constructor(timeoutMs: number, timedOut: (call: T, error: Error) => void, timeoutError: (timeoutMs: number) => Error) {
    this.#timeoutMs = timeoutMs;
    this.#timedOut = timedOut;
    this.#timeoutError = timeoutError;
  }

  /** The deadline of a call starting now. */
  deadline(): number {
    return this.#timeoutMs === Infinity ? Infinity : performance.now() + this.#timeoutMs;
  }

  /**
   * Starts bounding `call` (whose deadline came from {@link deadline}): unless it is answered
   * first, it is marked answered and handed to `timedOut` once its deadline passes. A late answer
   * then finds it answered and is dropped.
   */
  add(call: T): void {
    if (call.deadline === Infinity) return;
    const queue = this.#pending;
    while (this.#head < queue.length && queue[this.#head]!.answered) this.#head++;
    if (this.#head === queue.length) {
      queue.length = 0;
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= queue.length) {
      queue.splice(0, this.#head);
      this.#head = 0;
    }
    queue.push(call);
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
    const expired: T[] = [];
    for (; this.#head < queue.length; this.#head++) {
      const call = queue[this.#head]!;
      if (call.answered) continue;
      if (call.deadline > now) {
        this.#arm(call.deadline - now);
        break;
      }
      call.answered = true;
      expired.push(call);
    }
    if (this.#head === queue.length) {
      queue.length = 0;
      this.#head = 0;
    }
    for (const call of expired) this.#timedOut(call, this.#timeoutError(this.#timeoutMs));
  };
}
