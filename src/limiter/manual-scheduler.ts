import { rangeError } from '../core/errors';
import { Printable } from '../core/symbols';
import { assertNumber, finiteNumber } from '../core/validate';
import type { Scheduler } from './scheduler';

interface Timer {
  readonly dueMs: number;
  readonly callback: () => void;
}

/**
 * A scheduler whose time moves only when a test moves it, firing due timers in order as it does:
 * an hour of waiting runs in a microsecond, and no test ever sleeps. Pass it as a limiter's
 * `clock`; it is the clock and the timers at once.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, ManualScheduler, Rule, TokenBucket } from 'ratekeeper';
 * const scheduler = new ManualScheduler();
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: scheduler });
 * limiter.tryAcquire('k');
 * const granted = limiter.acquire('k'); // waits for the next token
 * scheduler.advance(1000); // fires the wait's timer: granted resolves
 * ```
 */
export class ManualScheduler extends Printable implements Scheduler {
  #nowMs: number;
  /** Armed timers in the order they were set; firing picks the earliest due, the oldest on a tie. */
  readonly #timers = new Set<Timer>();

  /** @param startMs the first reading. @default 0 */
  constructor(startMs = 0) {
    super();
    this.#nowMs = finiteNumber('startMs', startMs);
  }

  now(): number {
    return this.#nowMs;
  }

  /** How many timers are armed: a test can check that nothing is left waiting. */
  get pending(): number {
    return this.#timers.size;
  }

  /** A summary for logs and `JSON.stringify`: the reading and the timers armed. */
  override toJSON(): { now: number; pending: number } {
    return { now: this.#nowMs, pending: this.pending };
  }

  setTimeout(callback: () => void, delayMs: number): unknown {
    // Like the global setTimeout, a delay that is negative or not a number means now.
    const timer: Timer = { dueMs: this.#nowMs + (delayMs > 0 ? delayMs : 0), callback };
    this.#timers.add(timer);
    return timer;
  }

  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as Timer);
  }

  /**
   * Moves time forward by `ms`, stopping at each timer's due time to fire it, timers set meanwhile
   * included, and returns the new reading. Promise callbacks run after it returns; use
   * `advanceAsync` when the code under test awaits between timers.
   */
  advance(ms: number): number {
    const target = this.#nowMs + stepOf(ms);
    for (let timer = this.#next(target); timer !== undefined; timer = this.#next(target)) this.#fire(timer);
    this.#nowMs = target;
    return target;
  }

  /**
   * Like `advance`, but yields to the event loop before each timer fires and before it returns, so
   * that code which awaits between waits (a loop of `await limiter.acquire(...)`) sees time as it
   * would in production. Work that waits on real I/O is not waited for.
   */
  async advanceAsync(ms: number): Promise<number> {
    const target = this.#nowMs + stepOf(ms);
    for (;;) {
      await new Promise<void>((resolve) => setTimeout(resolve, 0));
      const timer = this.#next(target);
      if (timer === undefined) break;
      this.#fire(timer);
    }
    this.#nowMs = target;
    return target;
  }

  /** The earliest armed timer due no later than `target`. */
  #next(target: number): Timer | undefined {
    let next: Timer | undefined;
    for (const timer of this.#timers) if (timer.dueMs <= target && (next === undefined || timer.dueMs < next.dueMs)) next = timer;
    return next;
  }

  #fire(timer: Timer): void {
    this.#timers.delete(timer);
    if (timer.dueMs > this.#nowMs) this.#nowMs = timer.dueMs;
    timer.callback();
  }
}

function stepOf(ms: number): number {
  assertNumber('ms', ms);
  if (!(ms >= 0 && ms < Infinity)) throw rangeError(`ratekeeper: \`ms\` must be a finite number of at least 0, got ${ms}`);
  return ms;
}
