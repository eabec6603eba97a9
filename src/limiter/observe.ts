import type { Allowed, Decision, DegradedReason, Rejected } from '../core/decision';
import { typeError } from '../core/errors';
import { describe } from '../core/validate';
import { type AcquireOptions, readAcquireOptions } from './acquire-options';
import type { AsyncRateLimiter, RateLimiter } from './keyed-rate-limiter';
import type { WaitingRateLimiter } from './pace';
import type { AsyncReservation, Reservation } from './reservation';

/**
 * What an observed limiter tells its hook about one decision. One small object of one shape per
 * decision; everything in it was already at hand, so building it reads no clock and copies nothing.
 *
 * `decision` and `allowed` are the inner limiter's answer. In shadow mode a refusal still reads
 * `allowed: false` (so the counters of an enforced limit and of a shadowed one mean the same) and
 * `shadowed: true` says that the caller was let through anyway.
 *
 * @example
 * ```ts
 * import type { DecisionEvent } from 'ratekeeper';
 * const line = (e: DecisionEvent) =>
 *   `${e.name} ${e.key} x${e.permits}: ${e.allowed ? 'allowed' : e.shadowed ? 'would refuse' : 'refused'}${e.degraded ? ` (${e.degraded})` : ''}`;
 * ```
 */
export interface DecisionEvent {
  /** The label given to `observe`: which limit (policy, algorithm, tier) decided. */
  readonly name: string;
  readonly key: string;
  readonly permits: number;
  /** The inner limiter's decision, as it returned it: a refusal here is the one shadow mode overrode. */
  readonly decision: Decision;
  /** `decision.allowed`: the limit's verdict, even when shadow mode let the request through. */
  readonly allowed: boolean;
  /** `decision.degraded`: why the decision was reached without the limiter's normal state, if it was. */
  readonly degraded: DegradedReason | undefined;
  /** True when the inner limiter refused and shadow mode allowed the request instead. */
  readonly shadowed: boolean;
}

/**
 * What an observed limiter tells `onChange` about a change made to a key without a request being
 * decided: a cost charged, a reservation settled or cancelled, a block, a reset. One per call, once
 * the inner limiter has made the change (for an async limiter, as its promise settles).
 *
 * @example
 * ```ts
 * import type { ChangeEvent } from 'ratekeeper';
 * const line = (e: ChangeEvent) =>
 *   e.operation === 'block' ? `${e.name} blocked ${e.key} for ${e.durationMs} ms` : `${e.name} ${e.operation} ${e.key} ${e.permits ?? ''}`;
 * ```
 */
export interface ChangeEvent {
  /** The label given to `observe`. */
  readonly name: string;
  readonly key: string;
  /** `'settle'` and `'cancel'` are those of a reservation the observed limiter made. */
  readonly operation: 'charge' | 'settle' | 'cancel' | 'block' | 'reset';
  /** The permits charged (`charge`) or the real cost settled (`settle`; 0 for `cancel`); undefined for `block` and `reset`. */
  readonly permits: number | undefined;
  /** How long the key is blocked (`block`); undefined otherwise. */
  readonly durationMs: number | undefined;
  /** The key's state after, as the inner limiter returned it (`charge`, `settle`); undefined otherwise. */
  readonly decision: Decision | undefined;
}

/**
 * A decision from an observed limiter: a plain `Decision`, except that in shadow mode a request the
 * inner limiter refused comes back as an `Allowed` with `shadowed: true` (the refusal's `limit`,
 * `remaining`, `resetAfterMs` and `degraded` kept, `retryAfterMs` 0). Nothing else carries `shadowed`.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, observe } from 'ratekeeper';
 * const limiter = observe(new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(1)) }), {
 *   shadow: true,
 *   onDecision: () => {},
 * });
 * limiter.tryAcquire('k');
 * const decision = limiter.tryAcquire('k');
 * decision.allowed; // true
 * decision.shadowed; // true: the limit said no
 * ```
 */
export type ObservedDecision = (Allowed & { readonly shadowed?: true }) | (Rejected & { readonly shadowed?: never });

/**
 * The limiter `observe` returns for a limiter `L`: synchronous when `L` is, async when `L` is, with
 * each of `acquire`, `lease`, `peek`, `reserve`, `charge`, `block`, `reset`, `close` (and `using`) that `L`
 * has, taking and returning what `L`'s does (a decision or a reservation's decision may come back
 * shadowed).
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, observe, type Observed } from 'ratekeeper';
 * const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)) });
 * const observed: Observed<KeyedRateLimiter> = observe(inner, { onDecision: () => {} });
 * const decision = observed.tryAcquire('k'); // synchronous, as inner.tryAcquire is
 * observed.charge('k', 2); // and the key operations too
 * ```
 */
export type Observed<L extends RateLimiter | AsyncRateLimiter> = (L extends RateLimiter
  ? { tryAcquire(key: string, permits?: number): ObservedDecision }
  : { tryAcquire(key: string, permits?: number): Promise<ObservedDecision> }) &
  (L extends WaitingRateLimiter ? { acquire(key: string, permits?: number, options?: AcquireOptions): Promise<ObservedDecision> } : unknown) &
  (L extends { peek(key: string, permits?: number): infer D }
    ? { peek(key: string, permits?: number): D extends Promise<Decision> ? Promise<ObservedDecision> : ObservedDecision }
    : unknown) &
  (L extends { reserve(key: string, permits?: number): infer R } ? { reserve(key: string, permits?: number): ObservedReservation<R> } : unknown) &
  (L extends { lease(key: string, permits?: number, options?: AcquireOptions): Promise<infer R> }
    ? { lease(key: string, permits?: number, options?: AcquireOptions): Promise<Shadowable<R>> }
    : unknown) &
  Pick<L, Extract<keyof L, 'charge' | 'block' | 'reset' | 'close' | typeof Symbol.dispose | typeof Symbol.asyncDispose>>;

/** A reservation `R` (or a promise of one) whose decision may come back shadowed. */
type ObservedReservation<R> = R extends Promise<infer A> ? Promise<Shadowable<A>> : Shadowable<R>;
type Shadowable<R> = Omit<R, 'decision'> & { readonly decision: ObservedDecision };

/**
 * Options of {@link observe}.
 *
 * @example
 * ```ts
 * import type { ObserveOptions } from 'ratekeeper';
 * const options: ObserveOptions = {
 *   name: 'checkout-v2',
 *   shadow: true,
 *   onDecision: (event) => {
 *     if (event.shadowed) console.warn(`checkout-v2 would refuse ${event.key}`);
 *   },
 *   onError: (error) => console.error('rate-limit hook failed', error),
 * };
 * ```
 */
export interface ObserveOptions {
  /**
   * Called once for every decision on a request (`tryAcquire`, `acquire`, `reserve`, `lease`),
   * synchronously as it is made (for an async limiter, as it settles); for `acquire` and `lease`,
   * their final answer.
   */
  onDecision: (event: DecisionEvent) => void;
  /**
   * Called once for every change made to a key without a request being decided: `charge`, a
   * reservation's `settle` or `cancel` (a lease's release: its in-flight permits are free from then
   * on), `block`, `reset`. `peek`, `close`, a lease's `extend` and a lease ending by time (no call
   * makes it) report nothing. @default undefined (not reported)
   */
  onChange?: ((event: ChangeEvent) => void) | undefined;
  /** The label events carry, to tell limits apart in logs and metrics. @default 'default' */
  name?: string | undefined;
  /**
   * Shadow mode: allow every request, reporting those the inner limiter refused with
   * `shadowed: true`. A refusal spends nothing, so requests let through this way leave the inner
   * limiter exactly as if they had never been made. `acquire` then never waits. @default false
   */
  shadow?: boolean | undefined;
  /**
   * Receives what `onDecision` or `onChange` throws. The core writes to no console, and a broken
   * metrics hook must not fail the request it was reporting on, so without `onError` such errors are
   * dropped; whatever `onError` throws is dropped too. @default undefined (dropped)
   */
  onError?: ((error: unknown, event: DecisionEvent | ChangeEvent) => void) | undefined;
}

/**
 * Wraps a limiter so that every decision is reported to `onDecision`, and optionally (`shadow`) so
 * that it refuses nothing, for trying a new limit on real traffic before enforcing it. The wrapper
 * decides exactly as `limiter` does; a synchronous limiter stays synchronous. Whatever else of a
 * limiter's API `limiter` has is forwarded: `acquire` (reporting only each final decision, once),
 * `reserve` and `lease` (each decision reported as a request's; a lease's `extend` is forwarded),
 * `peek` (reporting nothing), `charge`,
 * `block`, `reset` and a reservation's `settle`/`cancel` (reported to `onChange`), and `close`
 * (with `using`). A call that throws or rejects (a bad argument, an aborted wait) reached no
 * decision and reports nothing. Limiters that are not wrapped pay nothing, and an app that never
 * imports `observe` does not ship it.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, observe } from 'ratekeeper';
 * const refusals = new Map<string, number>();
 * const limiter = observe(new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) }), {
 *   name: 'search',
 *   onDecision: (event) => {
 *     if (!event.allowed) refusals.set(event.key, (refusals.get(event.key) ?? 0) + 1);
 *   },
 * });
 * for (let i = 0; i < 3; i++) limiter.tryAcquire('user-1');
 * refusals.get('user-1'); // 1
 * ```
 */
export function observe<L extends RateLimiter | AsyncRateLimiter>(limiter: L, options: ObserveOptions): Observed<L> {
  const inner = limiter as Partial<RateLimiter & WaitingRateLimiter> | null;
  if (inner === null || typeof inner !== 'object' || typeof inner.tryAcquire !== 'function') {
    throw typeError(`ratekeeper: \`limiter\` must be an object with a tryAcquire(key, permits) method, got ${describe(limiter)}`);
  }
  if (options === null || typeof options !== 'object') throw typeError(`ratekeeper: observe options must be an object, got ${describe(options)}`);
  const { onDecision, onChange, name = 'default', shadow = false, onError } = options;
  if (typeof onDecision !== 'function') throw typeError(`ratekeeper: \`onDecision\` must be a function, got ${describe(onDecision)}`);
  if (onChange !== undefined && typeof onChange !== 'function') throw typeError(`ratekeeper: \`onChange\` must be a function, got ${describe(onChange)}`);
  if (typeof name !== 'string') throw typeError(`ratekeeper: \`name\` must be a string, got ${describe(name)}`);
  if (typeof shadow !== 'boolean') throw typeError(`ratekeeper: \`shadow\` must be a boolean, got ${describe(shadow)}`);
  if (onError !== undefined && typeof onError !== 'function') throw typeError(`ratekeeper: \`onError\` must be a function, got ${describe(onError)}`);

  const tell = <E extends DecisionEvent | ChangeEvent>(hook: ((event: E) => void) | undefined, event: E): void => {
    try {
      hook?.(event);
    } catch (error) {
      try {
        onError?.(error, event);
      } catch {
        // Dropped on purpose: see `onError`.
      }
    }
  };
  const shadowed = (decision: Decision): ObservedDecision =>
    shadow && !decision.allowed ? { ...decision, allowed: true, retryAfterMs: 0, shadowed: true } : decision;
  const report = (key: string, permits: number, decision: Decision): ObservedDecision => {
    tell(onDecision, { name, key, permits, decision, allowed: decision.allowed, degraded: decision.degraded, shadowed: shadow && !decision.allowed });
    return shadowed(decision);
  };
  const changed = (key: string, operation: ChangeEvent['operation'], permits?: number, durationMs?: number, decision?: Decision) =>
    tell(onChange, { name, key, operation, permits, durationMs, decision });

  const observed: Record<string | symbol, unknown> = {};
  // Waiting is how a limit refuses a patient caller, so in shadow mode a wait is a refusal, let through at once.
  const waiting = <R>(wait: (key: string, permits: number, options?: AcquireOptions) => Promise<R>, after: (key: string, permits: number, settled: R) => unknown) =>
    (key: string, permits = 1, options?: AcquireOptions) => {
      let forwarded = options;
      if (shadow) {
        // Checked as the inner limiter would, before `maxWaitMs` is replaced: a bad option is an error here too.
        let signal: AbortSignal | undefined;
        try {
          signal = readAcquireOptions(options).signal;
        } catch (error) {
          return Promise.reject(error);
        }
        forwarded = signal === undefined ? { maxWaitMs: 0 } : { signal, maxWaitMs: 0 };
      }
      return wait(key, permits, forwarded).then((settled) => after(key, permits, settled));
    };
  if (typeof inner.acquire === 'function') observed.acquire = waiting((k, p, o) => inner.acquire!(k, p, o), report);
  // Only a granted reservation can change its key when settled; a refused one's settle is its refusal.
  const reservation = (key: string, permits: number, inner: (Reservation | AsyncReservation) & { extend?: (ms: number) => unknown }) => {
    const granted = inner.decision.allowed;
    const wrapped: Record<string, unknown> = {
      decision: report(key, permits, inner.decision),
      settle: (actual: number) => then(inner.settle(actual), (decision) => (granted && changed(key, 'settle', actual, undefined, decision), shadowed(decision))),
      cancel: () => then(inner.cancel(), () => void (granted && changed(key, 'cancel', 0))),
    };
    if (typeof inner.extend === 'function') wrapped.extend = (ms: number) => inner.extend!(ms);
    return wrapped;
  };
  const leasing = inner as { lease?: (key: string, permits?: number, options?: AcquireOptions) => Promise<Reservation | AsyncReservation> };
  if (typeof leasing.lease === 'function') observed.lease = waiting((k, p, o) => leasing.lease!(k, p, o), reservation);
  // Forwarded by presence, so that one wrapper serves a synchronous limiter and a store's async one;
  // `after` sees the call's arguments and its result (once settled) and answers in its place.
  // The method is looked up at each call: a KeyedRateLimiter puts its own tryAcquire in place at its first block.
  const methods = inner as Record<string | symbol, (...args: Args) => unknown>;
  const forward = <R>(method: string | symbol, after: (args: Args, result: R) => unknown) => {
    if (typeof methods[method] === 'function') observed[method] = (...args: Args) => then(methods[method]!(...args) as R | Promise<R>, (result) => after(args, result));
  };
  forward<Decision>('tryAcquire', ([key, permits = 1], decision) => report(key, permits, decision));
  forward<Decision>('peek', (_, decision) => shadowed(decision));
  forward<Decision>('charge', ([key, permits], decision) => (changed(key, 'charge', permits, undefined, decision), decision));
  forward('block', ([key, durationMs]) => changed(key, 'block', undefined, durationMs));
  forward('reset', ([key]) => changed(key, 'reset'));
  forward<Reservation | AsyncReservation>('reserve', ([key, permits = 1], reserved) => reservation(key, permits, reserved));
  for (const method of ['close', Symbol.dispose, Symbol.asyncDispose, Symbol.for('Symbol.dispose'), Symbol.for('Symbol.asyncDispose')]) forward(method, (_, result) => result);
  return observed as Observed<L>;
}

/** A forwarded call's arguments: a key, then a number (permits or a duration) when the method takes one. */
type Args = [key: string, amount?: number];

/** `next` applied to a value, or to a promise's value once it settles: one path for sync and async limiters. */
function then<T, U>(value: T | Promise<T>, next: (value: T) => U): U | Promise<U> {
  return typeof (value as Partial<Promise<T>> | undefined)?.then === 'function' ? (value as Promise<T>).then(next) : next(value as T);
}
