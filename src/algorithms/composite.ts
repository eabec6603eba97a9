import { allow, reject, type Decision } from '../core/decision';
import { typeError } from '../core/errors';
import { Printable } from '../core/symbols';
import { checkTime, describe } from '../core/validate';
import type { Receipt, Reserved } from './accounting';
import type { AccountingAlgorithm, PeekableAlgorithm } from './algorithm';
import { checkLeaseMs, isHolding, MAX_LEASE_MS, unreleasable } from './concurrency';

/**
 * Several rules on one key at once (10 per second and 1000 per hour), decided all-or-nothing: a
 * request is allowed only when every part allows it, and nothing is spent in any part otherwise.
 *
 * The decision reports the part that binds, the one with the fewest permits left (the first listed
 * on a tie): `limit` and `remaining` are that part's, so `remaining` is the smallest of all parts.
 * `retryAfterMs` is the exact time until every part allows the request together, and
 * `resetAfterMs` the time until every part is back to new. Permits may not exceed the smallest
 * part's limit. Use it as the result of the keyed limiter's factory, with fresh parts for each key.
 * A part is taken to be as new when its `peek(nowMs, 0)` answers a `resetAfterMs` of 0.
 *
 * With a `Concurrency` part ("100 a minute and 2 at once") a grant is held in flight until it is
 * released, so it is taken with `reserve` and given back with `release` (a keyed limiter's
 * reservation does both); `tryAcquire` and `charge` throw. A refusal's `retryAfterMs` is then the
 * time until every part allows together as far as time alone goes (an upper bound: a release may
 * come sooner), at most 2^42.
 *
 * @example
 * ```ts
 * import { Composite, KeyedRateLimiter, Rule, SlidingWindowLog, TokenBucket } from 'ratekeeper';
 * const limiter = new KeyedRateLimiter({
 *   algorithm: () => new Composite([new TokenBucket(Rule.perSecond(10)), new SlidingWindowLog(Rule.perHour(1000))]),
 * });
 * limiter.tryAcquire('user-1').remaining; // 9: the per-second part binds
 * ```
 */
export class Composite extends Printable implements AccountingAlgorithm {
  /** The rules this key is held to, each with its own state; nested composites are flattened. */
  readonly parts: readonly PeekableAlgorithm[];
  /** The latest time a request was granted at: an earlier reading counts as no time passing, as in every part. */
  private latest = -Infinity;
  /** Whether a part holds what it grants in flight (a `Concurrency`): then only `reserve` may grant. */
  private readonly holding: boolean;

  /**
   * @param parts one or more distinct algorithm instances (any ratekeeper algorithm, composites
   * included: one is known by its `parts` array, so a Composite of the other build is flattened too).
   */
  constructor(parts: readonly PeekableAlgorithm[]) {
    super();
    if (!Array.isArray(parts) || parts.length === 0) {
      throw typeError(`ratekeeper: \`parts\` must be a non-empty array of algorithms, got ${describe(parts)}`);
    }
    parts.forEach((part: unknown, i) => {
      const p = part as Partial<PeekableAlgorithm> | null;
      if (p === null || typeof p !== 'object' || typeof p.tryAcquire !== 'function' || typeof p.peek !== 'function' || typeof p.isIdle !== 'function') {
        throw typeError(`ratekeeper: \`parts[${i}]\` must be an algorithm with tryAcquire, peek and isIdle, got ${describe(part)}`);
      }
    });
    const flat = parts.flatMap((part) => partsOf(part) ?? [part]);
    // One state in two places would spend twice for one request.
    if (new Set(flat).size !== flat.length) throw typeError('ratekeeper: `parts` holds the same algorithm twice; give each part its own instance');
    this.parts = flat;
    this.holding = flat.some(isHolding);
  }

  tryAcquire(nowMs: number, permits = 1): Decision {
    if (this.holding) throw unreleasable('tryAcquire');
    const decision = this.peek(nowMs, permits);
    if (!decision.allowed) return decision;
    // Every part allowed at this very moment and nothing ran in between, so each spends as it peeked.
    const now = nowMs > this.latest ? nowMs : this.latest;
    for (const part of this.parts) part.tryAcquire(now, permits);
    this.latest = now;
    return decision;
  }

  /** Charges every part (a cost that happened counts against every rule); returns the state after. */
  charge(nowMs: number, permits: number): Decision {
    if (this.holding) throw unreleasable('charge');
    const parts = this.accounting('charge');
    checkTime(nowMs);
    const now = nowMs > this.latest ? nowMs : this.latest;
    // The first part checks `permits` before anything is spent; the rest take the same value.
    for (const part of parts) part.charge(now, permits);
    this.latest = now;
    return this.peek(now, 0);
  }

  /** Reserves in every part or none; the receipt holds each part's. */
  reserve(nowMs: number, permits = 1): Reserved {
    const parts = this.accounting('reserve');
    const decision = this.peek(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const now = nowMs > this.latest ? nowMs : this.latest;
    const receipt = parts.map((part) => part.reserve(now, permits).receipt as Receipt);
    this.latest = now;
    return { decision, receipt };
  }

  refund(nowMs: number, receipt: Receipt, permits: number): void {
    const parts = this.accounting('refund');
    const now = nowMs > this.latest ? nowMs : this.latest;
    parts.forEach((part, i) => part.refund(now, (receipt as Receipt[])[i] as Receipt, permits));
  }

  /**
   * Releases what a reservation holds in flight (its `Concurrency` parts' permits), now; the rate
   * parts keep what they counted. Returns whether anything was still held.
   */
  release(nowMs: number, receipt: Receipt): boolean {
    checkTime(nowMs);
    const now = nowMs > this.latest ? nowMs : this.latest;
    let released = false;
    // Each in-flight part picks its own lease out of the receipt, wherever it stands in it: a
    // receipt issued before a reconfiguration releases the leases it carried over too.
    for (const part of this.parts) if (isHolding(part) && part.release(now, receipt)) released = true;
    return released;
  }

  /**
   * Holds a reservation's in-flight permits for `ms` from now (whole ms from 1 to 2^42, or
   * `Infinity`); false when none is still held (see `Concurrency.extend`).
   */
  extend(nowMs: number, receipt: Receipt, ms: number): boolean {
    checkTime(nowMs);
    checkLeaseMs('ms', ms);
    const now = nowMs > this.latest ? nowMs : this.latest;
    let extended = false;
    for (const part of this.parts) if (isHolding(part) && part.extend(now, receipt, ms)) extended = true;
    return extended;
  }

  peek(nowMs: number, permits = 1): Decision {
    checkTime(nowMs);
    const now = nowMs > this.latest ? nowMs : this.latest;
    if (permits === 0) return this.stateAt(now);
    let limit = 0;
    let available = Infinity;
    let resetAfterMs = 0;
    let longest = 0;
    for (const part of this.parts) {
      const decision = part.peek(now, permits);
      // Compare what each part has now: an allowing part reports what is left after the request.
      const has = decision.allowed ? decision.remaining + permits : decision.remaining;
      if (has < available) {
        limit = decision.limit;
        available = has;
      }
      if (decision.resetAfterMs > resetAfterMs) resetAfterMs = decision.resetAfterMs;
      if (decision.retryAfterMs > longest) longest = decision.retryAfterMs;
    }
    if (longest === 0) return allow(limit, available - permits, resetAfterMs);
    // The key cannot be as new before the request fits, so its reset is looked for from the retry on,
    // the same way: both are then read at the same clock readings, however those round.
    const retryAfterMs = this.waitFrom(now, permits, longest);
    return reject(limit, available, retryAfterMs, this.waitFrom(now, 0, retryAfterMs));
  }

  /** The state now, for `peek(nowMs, 0)`: the fewest permits any part has, and the latest reset. */
  private stateAt(now: number): Decision {
    let binding: Decision | undefined;
    let resetAfterMs = 0;
    for (const part of this.parts) {
      const decision = part.peek(now, 0);
      if (binding === undefined || decision.remaining < binding.remaining) binding = decision;
      if (decision.resetAfterMs > resetAfterMs) resetAfterMs = decision.resetAfterMs;
    }
    const { limit, remaining } = binding as Decision;
    return allow(limit, remaining, resetAfterMs);
  }

  /** The parts, once each is known to keep accounts (every ratekeeper algorithm does; a custom one may not). */
  private accounting(operation: string): readonly AccountingAlgorithm[] {
    const parts = this.parts as readonly Partial<AccountingAlgorithm>[];
    parts.forEach((part, i) => {
      if (typeof part.charge !== 'function' || typeof part.reserve !== 'function' || typeof part.refund !== 'function') {
        throw typeError(`ratekeeper: Composite ${operation} needs every part to have charge, reserve and refund; \`parts[${i}]\` has not`);
      }
    });
    return parts as readonly AccountingAlgorithm[];
  }

  isIdle(nowMs: number): boolean {
    return this.parts.every((part) => part.isIdle(nowMs));
  }

  /** A summary for logs and `JSON.stringify`: the parts, each as it summarizes itself. */
  override toJSON(): { algorithm: 'composite'; parts: readonly PeekableAlgorithm[] } {
    return { algorithm: 'composite', parts: this.parts };
  }

  /**
   * The first whole ms, `wait` or later, at which every part allows the request; for `permits` 0,
   * at which every part is as new (its state now resets in 0 ms). For the built-in algorithms the
   * first guess is already the answer on an integer clock: with nothing spent, a refusal only eases
   * as time passes, so a part that allows now allows later too. A custom part need not behave so
   * (one that opens only in business hours), and on a fractional clock `now + wait` may round to a
   * reading just short of the moment a part meant; hence the check at the guess, moving on until
   * all agree.
   *
   * A part's clock may run ahead of this one's (a refund or an extension at a later reading): until
   * the reading passes it, the part answers the same short retry at every guess. So each step is at
   * least twice the last, and once one lands where all allow, the first such ms is searched for
   * between the last refusal and it: whatever the parts' clocks, about 2·42 guesses at most.
   */
  private waitFrom(now: number, permits: number, wait: number): number {
    let step = 0;
    let refused = wait - 1;
    let longest = this.longestAt(now + wait, permits);
    while (longest !== 0) {
      // An in-flight part whose leases never end by time refuses at every time: its 2^42, the
      // answer of a refusal only a release can end, is the answer.
      if (this.holding && wait + longest >= MAX_LEASE_MS) return MAX_LEASE_MS;
      // At a time so large (a clock gone wrong) that adding the wait no longer moves it, the parts
      // would refuse for ever: answer the wait found so far instead of looping for ever.
      if (now + wait + longest === now + wait) return wait + longest;
      // The parts refuse for `longest` more at least; the next guess may go further.
      refused = wait + longest - 1;
      step = Math.max(longest, 2 * step);
      wait = this.holding ? Math.min(wait + step, MAX_LEASE_MS - 1) : wait + step;
      longest = this.longestAt(now + wait, permits);
    }
    // All allow at `wait` and refuse up to `refused`: the first ms they allow at lies between.
    while (wait - refused > 1) {
      const middle = refused + Math.floor((wait - refused) / 2);
      if (this.longestAt(now + middle, permits) === 0) wait = middle;
      else refused = middle;
    }
    return wait;
  }

  /** The longest any part still refuses at `at`: its retry, or for `permits` 0 its reset. */
  private longestAt(at: number, permits: number): number {
    let longest = 0;
    for (const part of this.parts) {
      const decision = part.peek(at, permits);
      const left = permits === 0 ? decision.resetAfterMs : decision.retryAfterMs;
      if (left > longest) longest = left;
    }
    return longest;
  }
}

/**
 * The parts of a composite, read by shape (a `parts` array) rather than by `instanceof`: a Composite
 * of the other build (ESM and CommonJS in one process) is a composite too, and a keyed limiter that
 * carries composites over does not have to bundle the class.
 */
export function partsOf(state: PeekableAlgorithm): readonly PeekableAlgorithm[] | undefined {
  const { parts } = state as { parts?: unknown };
  return Array.isArray(parts) ? (parts as PeekableAlgorithm[]) : undefined;
}

/** Whether any part of a state holds what it grants in flight (a `Concurrency`, alone or in a composite). */
export function holds(state: unknown): boolean {
  if (state === null || typeof state !== 'object') return false;
  const parts = partsOf(state as PeekableAlgorithm);
  return parts === undefined ? isHolding(state) : parts.some(isHolding);
}
