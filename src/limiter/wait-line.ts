import type { Decision, Rejected } from '../core/decision';

/**
 * How one caller's turn is decided and answered. `acquire` tries `tryAcquire` and answers the
 * decision; a keyed limiter's `lease` reserves and answers the reservation it made.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, type Turn } from 'ratekeeper';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) });
 * // Answers how long the caller waited, in ms, once granted.
 * const started = Date.now();
 * const timed: Turn<number> = {
 *   attempt: (key, permits) => limiter.tryAcquire(key, permits),
 *   answer: () => Date.now() - started,
 * };
 * ```
 */
export interface Turn<T> {
  /** Decides the caller's request now, without waiting. */
  attempt(key: string, permits: number): Decision | Promise<Decision>;
  /**
   * For a caller whose refusals may end sooner than their `retryAfterMs` says (an in-flight limit a
   * release frees): the least it must still wait, in ms. Absent: the refusal's `retryAfterMs`.
   */
  least?: ((key: string, permits: number) => number) | undefined;
  /** What the caller's promise resolves with, from the final decision. */
  answer(decision: Decision): T;
}

// The per-key queue of WaitQueue: a doubly linked list, so that a waiter that gives up leaves from
// anywhere in the line in O(1) and the head is always at hand.

/** One caller of `acquire`, linked into its key's line. */
export interface Waiter {
  readonly permits: number;
  /** How this caller's turn is decided and answered: the queue's own, or the caller's (see `Turn`). */
  readonly turn: Turn<unknown>;
  /** The latest time at which it may be granted: arrival + maxWaitMs. */
  readonly deadline: number;
  readonly resolve: (answer: unknown) => void;
  readonly reject: (reason: unknown) => void;
  stopListening: (() => void) | undefined;
  queued: boolean;
  prev: Waiter | undefined;
  next: Waiter | undefined;
}

/** The callers waiting on one key, first in, first out. It exists only while someone waits. */
export interface Line {
  readonly key: string;
  head: Waiter | undefined;
  tail: Waiter | undefined;
  /** The waiter whose attempt is still being decided (over a store); nobody else is tried meanwhile. */
  asking: Waiter | undefined;
  /**
   * The line's only timer, undefined when none is set; it fires at `timerAt`. Kept when the head is
   * woken early (a release, a refund): if the head must wait again, a timer due no later serves,
   * and firing early only tries the head once more. A line that empties clears it.
   */
  timer: unknown;
  timerAt: number;
  /** Whether the head waits (for its timer, or a wake). */
  armed: boolean;
  /** When the head is tried again by its timer, and the refusal that said so. */
  dueMs: number;
  /** The earliest the head may be granted: nobody behind it goes sooner (`dueMs` unless the head's refusal may end early). */
  earliestMs: number;
  refusal: Rejected | undefined;
  /** Waiters with a deadline: while there are none, nobody behind the head needs checking. */
  bounded: number;
  /** Waiters in the line. */
  size: number;
}

/** The longest delay a timer takes: beyond 2^31 - 1 ms, runtimes fire at once instead. */
const MAX_DELAY_MS = 2 ** 31 - 1;

/**
 * The timer delay for a refusal. A longer wait is taken in steps (the head is simply refused again
 * and the timer set anew), and a limiter of your own that answers less than 1 ms cannot make it spin.
 */
export function delayOf(retryAfterMs: number): number {
  return retryAfterMs >= 1 ? Math.min(retryAfterMs, MAX_DELAY_MS) : 1;
}

/** An empty line for `key`. */
export function openLine(key: string): Line {
  return { key, head: undefined, tail: undefined, asking: undefined, timer: undefined, timerAt: 0, armed: false, dueMs: 0, earliestMs: 0, refusal: undefined, bounded: 0, size: 0 };
}

/** Puts a waiter at the back of the line. */
export function join(line: Line, waiter: Waiter): void {
  if (line.tail === undefined) line.head = waiter;
  else line.tail.next = waiter;
  waiter.prev = line.tail;
  line.tail = waiter;
  line.size++;
  if (waiter.deadline !== Infinity) line.bounded++;
}

/** Takes a waiter out of the line, wherever it stands, and stops listening for its abort. */
export function leave(line: Line, waiter: Waiter): void {
  if (waiter.prev === undefined) line.head = waiter.next;
  else waiter.prev.next = waiter.next;
  if (waiter.next === undefined) line.tail = waiter.prev;
  else waiter.next.prev = waiter.prev;
  waiter.queued = false;
  line.size--;
  if (waiter.deadline !== Infinity) line.bounded--;
  waiter.stopListening?.();
}
