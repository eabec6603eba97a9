import type { Allowed, Decision, DegradedReason, Rejected } from '../core/decision';
import { typeError } from '../core/errors';
import { describe } from '../core/validate';
import { type AcquireOptions, readAcquireOptions } from './acquire-options';
import type { AsyncRateLimiter, RateLimiter } from './keyed-rate-limiter';
import type { WaitingRateLimiter } from './pace';

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
 * `acquire` when `L` has it.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket, observe, type Observed } from 'ratekeeper';
 * const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)) });
 * const observed: Observed<KeyedRateLimiter> = observe(inner, { onDecision: () => {} });
 * const decision = observed.tryAcquire('k'); // synchronous, as inner.tryAcquire is
 * ```
 */
export type Observed<L extends RateLimiter | AsyncRateLimiter> = (L extends RateLimiter
  ? { tryAcquire(key: string, permits?: number): ObservedDecision }
  : { tryAcquire(key: string, permits?: number): Promise<ObservedDecision> }) &
  (L extends WaitingRateLimiter ? { acquire(key: string, permits?: number, options?: AcquireOptions): Promise<ObservedDecision> } : unknown);

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
  /** Called once for every decision, synchronously as it is made (for an async limiter, as it settles). */
  onDecision: (event: DecisionEvent) => void;
  /** The label events carry, to tell limits apart in logs and metrics. @default 'default' */
  name?: string | undefined;
  /**
   * Shadow mode: allow every request, reporting those the inner limiter refused with
   * `shadowed: true`. A refusal spends nothing, so requests let through this way leave the inner
   * limiter exactly as if they had never been made. `acquire` then never waits. @default false
   */
  shadow?: boolean | undefined;
  /**
   * Receives what `onDecision` throws. The core writes to no console, and a broken metrics hook must
   * not fail the request it was reporting on, so without `onError` such errors are dropped; whatever
   * `onError` throws is dropped too. @default undefined (dropped)
   */
  onError?: ((error: unknown, event: DecisionEvent) => void) | undefined;
}

/**
 * Wraps a limiter so that every decision is reported to `onDecision`, and optionally (`shadow`) so
 * that it refuses nothing, for trying a new limit on real traffic before enforcing it. The wrapper
 * decides exactly as `limiter` does; a synchronous limiter stays synchronous; `acquire` is forwarded
 * when `limiter` has one, and reports only each final decision, once. A call that throws or rejects
 * (a bad argument, an aborted wait) reached no decision and reports nothing. Limiters that are not
 * wrapped pay nothing, and an app that never imports `observe` does not ship it.
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
  const { onDecision, name = 'default', shadow = false, onError } = options;
  if (typeof onDecision !== 'function') throw typeError(`ratekeeper: \`onDecision\` must be a function, got ${describe(onDecision)}`);
  if (typeof name !== 'string') throw typeError(`ratekeeper: \`name\` must be a string, got ${describe(name)}`);
  if (typeof shadow !== 'boolean') throw typeError(`ratekeeper: \`shadow\` must be a boolean, got ${describe(shadow)}`);
  if (onError !== undefined && typeof onError !== 'function') throw typeError(`ratekeeper: \`onError\` must be a function, got ${describe(onError)}`);

  const report = (key: string, permits: number, decision: Decision): ObservedDecision => {
    const shadowed = shadow && !decision.allowed;
    const event: DecisionEvent = { name, key, permits, decision, allowed: decision.allowed, degraded: decision.degraded, shadowed };
    try {
      onDecision(event);
    } catch (error) {
      try {
        onError?.(error, event);
      } catch {
        // Dropped on purpose: see `onError`.
      }
    }
    return shadowed ? { ...decision, allowed: true, retryAfterMs: 0, shadowed } : decision;
  };
  const tryAcquire = (key: string, permits = 1) => {
    const decision = inner.tryAcquire!(key, permits) as Decision | Promise<Decision>;
    return 'then' in decision ? decision.then((settled) => report(key, permits, settled)) : report(key, permits, decision);
  };
  const observed: Partial<Record<'tryAcquire' | 'acquire', unknown>> = { tryAcquire };
  if (typeof inner.acquire === 'function') {
    // Waiting is how a limit refuses a patient caller, so in shadow mode a wait is a refusal, let through at once.
    observed.acquire = (key: string, permits = 1, options?: AcquireOptions) => {
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
      return inner.acquire!(key, permits, forwarded).then((settled) => report(key, permits, settled));
    };
  }
  return observed as Observed<L>;
}
