import { type Clock, systemClock } from '../core/clock';
import { typeError } from '../core/errors';
import { describe } from '../core/validate';

/**
 * A clock and the timers that go with it, injected together so that waits follow the same time
 * the limiter decides by: `systemScheduler` in production, a `ManualScheduler` in tests.
 *
 * @example
 * ```ts
 * import { systemScheduler, type Scheduler } from 'ratekeeper';
 * const scheduler: Scheduler = systemScheduler;
 * const timer = scheduler.setTimeout(() => console.log('tick'), 100);
 * scheduler.clearTimeout(timer);
 * ```
 */
export interface Scheduler extends Clock {
  /** Calls `callback` once, about `delayMs` from now; returns a handle for `clearTimeout`. */
  setTimeout(callback: () => void, delayMs: number): unknown;
  /** Cancels a timer that has not fired yet. */
  clearTimeout(handle: unknown): void;
}

/**
 * The default scheduler: `systemClock` with the global `setTimeout` and `clearTimeout`.
 *
 * @example
 * ```ts
 * import { systemScheduler } from 'ratekeeper';
 * systemScheduler.setTimeout(() => console.log(systemScheduler.now()), 10);
 * ```
 */
export const systemScheduler: Scheduler = {
  now: systemClock.now,
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** The scheduler for a clock: the clock itself when it has timers, else the clock with the global timers. */
export function schedulerFor(clock: Clock): Scheduler {
  const timed = clock as Partial<Scheduler>;
  if (typeof timed.setTimeout === 'function' && typeof timed.clearTimeout === 'function') return clock as Scheduler;
  return { now: () => clock.now(), setTimeout: systemScheduler.setTimeout, clearTimeout: systemScheduler.clearTimeout };
}

/** Returns `scheduler` if it has the three methods; throws a `TypeError` naming it otherwise. */
export function checkScheduler(scheduler: unknown): Scheduler {
  const s = scheduler as Partial<Scheduler> | null;
  if (s === null || typeof s !== 'object' || typeof s.now !== 'function' || typeof s.setTimeout !== 'function' || typeof s.clearTimeout !== 'function') {
    throw typeError(`ratekeeper: \`scheduler\` must have now(), setTimeout() and clearTimeout(), got ${describe(scheduler)}`);
  }
  return scheduler as Scheduler;
}
