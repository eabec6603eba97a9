import { rangeError } from './errors';
import { Printable } from './symbols';
import { assertNumber, finiteNumber } from './validate';

/**
 * A source of time in milliseconds. Readings must never decrease.
 *
 * @example
 * ```ts
 * import type { Clock } from 'ratekeeper';
 * const frozen: Clock = { now: () => 42 };
 * ```
 */
export interface Clock {
  now(): number;
}

// Read once: `performance.timeOrigin` is fixed for the life of the realm, and reading it on every
// call costs more than the rest of a token-bucket decision.
const timeOrigin = performance.timeOrigin;

/**
 * The default clock: monotonic, yet anchored to the Unix epoch, in whole milliseconds.
 *
 * It reads `performance.timeOrigin + performance.now()`, so it never steps back when the wall clock
 * is corrected, while fixed windows still line up with wall-clock boundaries. Readings are floored
 * to whole milliseconds: every algorithm is exact on an integer clock, so production decisions are
 * as exact as the ones in tests.
 *
 * @example
 * ```ts
 * import { systemClock } from 'ratekeeper';
 * const started = systemClock.now(); // e.g. 1764442449123
 * ```
 */
export const systemClock: Clock = {
  now: () => Math.floor(timeOrigin + performance.now()),
};

/**
 * A clock that moves only when told to, so tests can run an hour of traffic in a microsecond.
 *
 * @example
 * ```ts
 * import { ManualClock } from 'ratekeeper';
 * const clock = new ManualClock();
 * clock.advance(1500);
 * clock.now(); // 1500
 * ```
 */
export class ManualClock extends Printable implements Clock {
  #nowMs: number;

  /** @param startMs the first reading. @default 0 */
  constructor(startMs = 0) {
    super();
    this.#nowMs = finiteNumber('startMs', startMs);
  }

  now(): number {
    return this.#nowMs;
  }

  /** Moves time forward by `ms` (zero or more) and returns the new reading. */
  advance(ms: number): number {
    assertNumber('ms', ms);
    if (!(ms >= 0 && ms < Infinity)) throw rangeError(`ratekeeper: \`ms\` must be a finite number of at least 0, got ${ms}`);
    this.#nowMs += ms;
    return this.#nowMs;
  }

  /**
   * Sets the reading to `ms`. Setting it earlier is allowed, to test how limiters cope with a clock
   * that runs backwards (they treat it as no time passing).
   */
  set(ms: number): void {
    this.#nowMs = finiteNumber('ms', ms);
  }

  /** A summary for logs and `JSON.stringify`: the reading. */
  override toJSON(): { now: number } {
    return { now: this.#nowMs };
  }
}
