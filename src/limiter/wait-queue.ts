import { type Decision, degrade, type Rejected } from '../core/decision';
import { ClosedError } from '../core/errors';
import { Closable } from '../core/symbols';
import { typeError } from '../core/errors';
import { describe, integerIn } from '../core/validate';
import { type AcquireOptions, readAcquireOptions } from './acquire-options';
import { checkScheduler, type Scheduler, systemScheduler } from './scheduler';
import { delayOf, join, leave, type Line, openLine, type Turn, type Waiter } from './wait-line';

/** Decides one request without waiting: a limiter's `tryAcquire`, in memory or over a store. */
export type AcquireAttempt = (key: string, permits: number) => Decision | Promise<Decision>;

export type { Turn } from './wait-line';

/** Options of {@link WaitQueue}. */
export interface WaitQueueOptions {
  /**
   * The most callers that may wait on one key at once. One more is answered at once with the key's
   * refusal, marked `degraded: 'queue-full'`, its `retryAfterMs` the time until the head's turn.
   * Over a store, while a line's first answer is on its way there is no refusal to answer with, so
   * callers still join; the bound holds from that answer on.
   * @default Infinity
   */
  maxWaiters?: number | undefined;
}

/**
 * How a key stands now, read without spending, for a caller that cannot be tried yet because
 * others are ahead: the key's `limit`, `remaining` and `resetAfterMs` now, and in `retryAfterMs`
 * the wait the caller's own permits would need were nobody ahead (0 when they fit now). Undefined
 * when it cannot be read (the key's answer then comes from the head's last refusal).
 */
export type StandingProbe = (key: string, permits: number) => Rejected | undefined;

/**
 * Makes callers wait, first in first out per key, over any limiter that decides without waiting,
 * synchronously or over a store. Only the head of each key's line is ever tried, on one timer due
 * no later than its exact `retryAfterMs` (or sooner, by a wake: a refund, a release, a reset), so no
 * request overtakes an earlier one, nothing polls, and no timer runs while nobody waits. A waiter holds no permits: leaving the line (abort, timeout) spends
 * nothing, and the next in line is tried at once.
 *
 * Over a store, an abort that arrives while the head's attempt is on its way rejects at once; if
 * that attempt is then granted, its permits stay spent, since a store cannot be asked to take them back.
 * `close()` (or `using`) ends every wait with a `ClosedError` and clears every timer.
 *
 * @example
 * ```ts
 * import { WaitQueue, systemScheduler, type AsyncRateLimiter } from 'ratekeeper';
 * declare const store: AsyncRateLimiter; // e.g. a RedisRateLimiter
 * const waiting = new WaitQueue((key, permits) => store.tryAcquire(key, permits), systemScheduler);
 * const decision = await waiting.acquire('user-1', 1, { maxWaitMs: 2000 });
 * ```
 */
export class WaitQueue extends Closable {
  readonly #lines = new Map<string, Line>();
  /** `acquire`'s turn: the queue's attempt, answered with its decision. */
  readonly #turn: Turn<Decision>;
  readonly #scheduler: Scheduler;
  #closed = false;
  readonly #standing: StandingProbe | undefined;
  readonly #maxWaiters: number;

  /**
   * @param attempt decides one request without waiting.
   * @param scheduler the clock and timers waits follow. @default systemScheduler
   * @param standing reads a key without spending. With it, a caller behind others whose own permits
   * cannot fit before its deadline, however the line moves, is answered at once, and a caller
   * turned away hears the key's state now. @default undefined
   * @param options `maxWaiters`.
   */
  constructor(attempt: AcquireAttempt, scheduler: Scheduler = systemScheduler, standing?: StandingProbe | undefined, options: WaitQueueOptions = {}) {
    super();
    if (typeof attempt !== 'function') throw typeError(`ratekeeper: \`attempt\` must be a function, got ${describe(attempt)}`);
    if (standing !== undefined && typeof standing !== 'function') throw typeError(`ratekeeper: \`standing\` must be a function, got ${describe(standing)}`);
    this.#turn = { attempt, answer: (decision) => decision };
    this.#scheduler = checkScheduler(scheduler);
    this.#standing = standing;
    this.#maxWaiters = checkMaxWaiters(options.maxWaiters);
  }

  /** Whether anyone waits on `key`: a limiter keeps such a key resident even when it is idle. */
  has(key: string): boolean {
    return this.#lines.has(key);
  }

  /**
   * Resolves with the `Allowed` decision once `permits` (default 1) are granted to `key`, after
   * everyone who asked before; with the `Rejected` decision if the wait would exceed `maxWaitMs`;
   * rejects with `signal.reason` on abort, and with a `TypeError` or `RangeError` for a bad argument.
   */
  acquire(key: string, permits = 1, options?: AcquireOptions): Promise<Decision> {
    return this.acquireWith(key, permits, options, this.#turn);
  }

  /**
   * Waits as `acquire` does, in the same line, but decides this caller's turn with its own
   * `turn.attempt` (a `reserve` whose reservation the caller keeps, say: the keyed limiter's
   * `lease`) and resolves with `turn.answer` of the final decision. `turn.least`, when given, reads
   * the least this caller must still wait, in ms, once refused: for refusals that may end sooner
   * than their `retryAfterMs` says (an in-flight limit, freed by a release whenever its holder is
   * done), so that the caller waits up to its `maxWaitMs` and is answered then, not at once.
   *
   * @example
   * ```ts
   * import { KeyedRateLimiter, Rule, TokenBucket, WaitQueue, type Reservation } from 'ratekeeper';
   * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) });
   * const line = new WaitQueue((key, permits) => limiter.tryAcquire(key, permits));
   * let made: Reservation | undefined;
   * const reservation = await line.acquireWith('k', 1, {}, {
   *   attempt: (key, permits) => (made = limiter.reserve(key, permits)).decision,
   *   answer: (decision) => (made?.decision === decision ? made : undefined),
   * });
   * reservation?.settle(1);
   * ```
   */
  acquireWith<T>(key: string, permits: number, options: AcquireOptions | undefined, turn: Turn<T>): Promise<T> {
    let read: ReturnType<typeof readAcquireOptions>;
    try {
      if (typeof key !== 'string') throw typeError(`ratekeeper: \`key\` must be a string, got ${describe(key)}`);
      integerIn('permits', permits, 1, Number.MAX_SAFE_INTEGER);
      read = readAcquireOptions(options);
    } catch (error) {
      return Promise.reject(error);
    }
    const { signal, maxWaitMs } = read;
    if (this.#closed) return Promise.reject(closedError());
    if (signal?.aborted === true) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      const deadline = this.#scheduler.now() + maxWaitMs;
      const waiter: Waiter = { permits, turn, deadline, resolve: resolve as (answer: unknown) => void, reject, stopListening: undefined, queued: true, prev: undefined, next: undefined };
      let line = this.#lines.get(key);
      if (line !== undefined && line.size >= this.#maxWaiters && line.armed) {
        const retryAfterMs = Math.max(1, Math.ceil(line.dueMs - this.#scheduler.now()));
        resolve(turn.answer(degrade({ ...(line.refusal as Rejected), retryAfterMs }, 'queue-full')));
        return;
      }
      if (line === undefined) {
        line = openLine(key);
        this.#lines.set(key, line);
        join(line, waiter);
        this.#run(line);
      } else {
        join(line, waiter);
        if (line.armed && deadline < Infinity) this.#turnAwayIfLate(line, waiter);
      }
      if (waiter.queued && signal !== undefined) this.#listen(line, waiter, signal);
      if (waiter.queued && turn.least !== undefined && deadline < Infinity) this.#expire(line, waiter);
    });
  }

  /**
   * Tries the head of every line again now, e.g. after the limiter's rule changed; with a key, only
   * that key's line (after a refund or a reset made room on it).
   */
  wake(key?: string): void {
    if (key !== undefined) return this.#wake(this.#lines.get(key));
    for (const line of [...this.#lines.values()]) this.#wake(line);
  }

  #wake(line: Line | undefined): void {
    if (line === undefined || !line.armed) return;
    this.#disarm(line);
    this.#run(line);
  }

  /**
   * Ends waiting for good: every waiter rejects with a `ClosedError` (code `ERR_RATEKEEPER_CLOSED`)
   * and spends nothing, every timer is cleared, and later `acquire` calls reject the same way at once.
   * An attempt already on its way to a store is not called back; if it is granted, its permits stay
   * spent. Calling it again does nothing.
   */
  override close(): void {
    this.#closed = true;
    for (const line of this.#lines.values()) {
      this.#disarm(line);
      this.#clearTimer(line);
      for (let waiter = line.head; waiter !== undefined; waiter = line.head) {
        leave(line, waiter);
        waiter.reject(closedError());
      }
    }
    this.#lines.clear();
  }

  /** A summary for logs: how many keys are waited on. */
  override toJSON(): { waitingKeys: number; closed: boolean } {
    return { waitingKeys: this.#lines.size, closed: this.#closed };
  }

  /** Tries heads until one must wait (a timer is armed), an answer is awaited, or the line is empty. */
  #run(line: Line): void {
    for (let waiter = line.head; waiter !== undefined && line.asking === undefined; waiter = line.head) {
      let outcome: Decision | Promise<Decision>;
      try {
        outcome = waiter.turn.attempt(line.key, waiter.permits);
        if (typeof (outcome as Partial<Promise<Decision>> | null)?.then === 'function') {
          line.asking = waiter;
          (outcome as Promise<Decision>).then(
            (decision) => this.#answered(line, waiter, { decision }),
            (error: unknown) => this.#answered(line, waiter, { error }),
          );
          return;
        }
        checkDecision(outcome);
      } catch (error) {
        // A thenable whose `then` threw may have left the line marked as asking.
        line.asking = undefined;
        leave(line, waiter);
        waiter.reject(error);
        continue;
      }
      if (!this.#decide(line, waiter, outcome as Decision)) return;
    }
    if (line.head === undefined && line.asking === undefined) {
      this.#clearTimer(line);
      this.#lines.delete(line.key);
    }
  }

  /** Settles the head with its decision, or arms the line's timer; true when the next head may be tried. */
  #decide(line: Line, waiter: Waiter, decision: Decision): boolean {
    const now = this.#scheduler.now();
    const least = decision.allowed ? 0 : this.#least(line, waiter, decision);
    if (decision.allowed || this.#late(waiter, now, least)) {
      leave(line, waiter);
      waiter.resolve(waiter.turn.answer(decision));
      return true;
    }
    line.refusal = decision;
    line.dueMs = now + decision.retryAfterMs;
    line.earliestMs = now + least;
    line.armed = true;
    const delay = delayOf(decision.retryAfterMs);
    if (line.timer === undefined || line.timerAt > now + delay) {
      this.#clearTimer(line);
      line.timerAt = now + delay;
      line.timer = this.#scheduler.setTimeout(() => {
        line.timer = undefined;
        if (!line.armed) return;
        line.armed = false;
        this.#run(line);
      }, delay);
    }
    for (let behind = waiter.next; behind !== undefined && line.bounded > 0; behind = behind.next) {
      if (line.earliestMs > behind.deadline) this.#turnAway(line, behind);
    }
    return false;
  }

  #answered(line: Line, waiter: Waiter, answer: { decision: Decision } | { error: unknown }): void {
    line.asking = undefined;
    // A waiter that left while its answer was on the way has been settled already.
    if (waiter.queued) {
      let outcome = answer;
      if ('decision' in answer) {
        try {
          checkDecision(answer.decision);
        } catch (error) {
          outcome = { error };
        }
      }
      if ('error' in outcome) {
        leave(line, waiter);
        waiter.reject(outcome.error);
      } else if (!this.#decide(line, waiter, outcome.decision)) return;
    }
    this.#run(line);
  }

  /**
   * Turns away a caller just queued behind others if it cannot be granted by its deadline: the head
   * goes later, or its own permits do not fit until later even were nobody ahead (those ahead only
   * spend, so the key gets no better before its turn).
   */
  #turnAwayIfLate(line: Line, waiter: Waiter): void {
    const standing = this.#standing?.(line.key, waiter.permits);
    const now = this.#scheduler.now();
    const own = standing === undefined ? 0 : this.#least(line, waiter, standing);
    if (line.earliestMs > waiter.deadline || this.#late(waiter, now, own)) this.#turnAway(line, waiter, standing);
  }

  /**
   * Whether a waiter still `wait` ms from a grant would pass its deadline. One whose refusals may end
   * early (`least`) waits until its deadline and no longer: at it, it is late.
   */
  #late(waiter: Waiter, now: number, wait: number): boolean {
    return now + wait > waiter.deadline || (waiter.turn.least !== undefined && now >= waiter.deadline);
  }

  /** The least a refused waiter must still wait, in ms: its turn's reading, or the refusal's `retryAfterMs`. */
  #least(line: Line, waiter: Waiter, refusal: Rejected): number {
    const { least } = waiter.turn;
    return least === undefined ? refusal.retryAfterMs : least(line.key, waiter.permits);
  }

  /**
   * Answers a caller with `least` at its deadline if it is still waiting then: its refusals do not
   * tell when it will be granted (a release may come any moment), so it waits until then. The head
   * is tried once more; one behind it gets the key's refusal as it stands.
   */
  #expire(line: Line, waiter: Waiter): void {
    const timer = this.#scheduler.setTimeout(() => {
      if (!waiter.queued) return;
      // A deadline past the longest timer is reached in steps.
      if (this.#scheduler.now() < waiter.deadline) return this.#expire(line, waiter);
      if (line.head !== waiter) return this.#turnAway(line, waiter);
      // An answer on its way lands past the deadline and settles the head then.
      if (line.asking !== undefined) return;
      if (line.armed) this.#disarm(line);
      this.#run(line);
    }, delayOf(waiter.deadline - this.#scheduler.now()));
    const stopListening = waiter.stopListening;
    waiter.stopListening = () => {
      stopListening?.();
      this.#scheduler.clearTimeout(timer);
    };
  }

  /**
   * Settles a waiter that cannot be granted before its deadline. It gets the key's state now (or,
   * unreadable, the head's last refusal) with `retryAfterMs` the least it would wait: until the
   * head's turn, or its own permits' wait if that is longer.
   */
  #turnAway(line: Line, waiter: Waiter, standing = this.#standing?.(line.key, waiter.permits)): void {
    const untilHead = Math.ceil(line.dueMs - this.#scheduler.now());
    const retryAfterMs = Math.max(untilHead, standing?.retryAfterMs ?? 0, 1);
    leave(line, waiter);
    waiter.resolve(waiter.turn.answer({ ...(standing ?? (line.refusal as Rejected)), retryAfterMs }));
  }

  #listen(line: Line, waiter: Waiter, signal: AbortSignal): void {
    // The listener is removed when the waiter leaves, so the line is still open whenever it runs.
    const onAbort = () => {
      const wasHead = line.head === waiter;
      leave(line, waiter);
      waiter.reject(signal.reason);
      // A head's answer on the way carries the line on when it lands; a head waiting on its timer
      // hands over at once, since the next request may fit now.
      if (!wasHead || line.asking !== undefined) return;
      if (line.armed) this.#disarm(line);
      this.#run(line);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    waiter.stopListening = () => signal.removeEventListener('abort', onAbort);
  }

  /** The head is to be tried now; its timer stays set (see `Line.timer`). */
  #disarm(line: Line): void {
    line.armed = false;
  }

  #clearTimer(line: Line): void {
    if (line.timer === undefined) return;
    this.#scheduler.clearTimeout(line.timer);
    line.timer = undefined;
  }
}

/**
 * Throws a `TypeError` unless `decision` is shaped like a Decision a line can act on. A limiter of
 * your own that answers something else would otherwise leave its caller hanging (no boolean
 * `allowed`) or retried every millisecond for ever (a refusal without a wait).
 */
function checkDecision(decision: unknown): void {
  const d = decision as Partial<Decision> | null;
  if (d === null || typeof d !== 'object' || typeof d.allowed !== 'boolean') throw decisionError(decision);
  if (!d.allowed && !(typeof d.retryAfterMs === 'number' && d.retryAfterMs >= 0)) throw decisionError(decision);
}

function closedError(): ClosedError {
  return new ClosedError('ratekeeper: the limiter was closed');
}

function decisionError(decision: unknown): TypeError {
  return typeError(`ratekeeper: \`attempt\` must return a Decision, got ${describe(decision)}`);
}

/** Returns `maxWaiters` if it is undefined (no bound) or a positive safe integer; throws naming it otherwise. */
function checkMaxWaiters(maxWaiters: unknown): number {
  return maxWaiters === undefined || maxWaiters === Infinity ? Infinity : integerIn('maxWaiters', maxWaiters, 1, Number.MAX_SAFE_INTEGER);
}
