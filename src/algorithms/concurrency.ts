import { allow, reject, type Decision } from '../core/decision';
import { typeError } from '../core/errors';
import { Printable } from '../core/symbols';
import { checkPermits, checkTime, describe, integerIn } from '../core/validate';
import type { Receipt, Reserved } from './accounting';
import type { AccountingAlgorithm } from './algorithm';

/**
 * The longest lease, and the longest any in-flight refusal reports: 2^42 ms (about 139 years), the
 * bound of every window and block, so that a store can keep a lease's end. It is also the
 * `retryAfterMs` of a refusal only a release can end (leases that never end by time).
 */
export const MAX_LEASE_MS = 2 ** 42;

/** One grant held in flight: the receipt of a `Concurrency` reservation. */
class Held {
  permits: number;
  end: number;

  constructor(permits: number, end: number) {
    this.permits = permits;
    this.end = end;
  }
}

/** Options of {@link Concurrency}. */
export interface ConcurrencyOptions {
  /**
   * How long a grant is held at most, in whole ms from 1 to 2^42, or `Infinity` (in memory only):
   * a holder that crashed, or forgot to settle, gives its permits back this long after its grant.
   * A holder that needs longer extends its lease (`reservation.extend(ms)`). @default 60000
   */
  leaseMs?: number | undefined;
}

/**
 * An in-flight limit: at most `limit` permits held at once. Unlike a rate, nothing refills it: what
 * it grants is held from the grant until the reservation is settled or cancelled (a release), or
 * until `leaseMs` after the grant, so that a holder that crashed gives its permits back.
 *
 * Alone, or as a `Composite` part beside rates ("100 a minute and 2 at once" is one all-or-nothing
 * decision). A grant has to be released, so it is taken with `reserve` (a keyed limiter's `reserve`
 * or `lease`); `tryAcquire` and `charge`, which nobody could release, throw a `TypeError`
 * (`ERR_RATEKEEPER_INVALID_ARGUMENT`).
 *
 * A refusal's `remaining` is the free permits now, and its `retryAfterMs` the time until enough held
 * leases end: an upper bound, since a release may come sooner (a waiting `lease` is woken by it),
 * and `2^42` when only a release can make room (leases of `Infinity`). `resetAfterMs` is the time
 * until every held lease has ended, at most `2^42`.
 *
 * @example
 * ```ts
 * import { Concurrency } from 'ratekeeper';
 * const twoAtOnce = new Concurrency(2, { leaseMs: 30_000 });
 * const first = twoAtOnce.reserve(0);
 * twoAtOnce.reserve(0);
 * twoAtOnce.peek(10).retryAfterMs; // 29990: the first lease ends at 30000, unless released sooner
 * if (first.receipt !== undefined) twoAtOnce.release(10, first.receipt);
 * twoAtOnce.peek(10).allowed; // true
 * ```
 */
export class Concurrency extends Printable implements AccountingAlgorithm {
  /** The most permits held at once. */
  readonly limit: number;
  /** How long a grant is held at most, from the grant (or its last extension). */
  readonly leaseMs: number;
  /** The leases held, earliest end first (ties in grant order). */
  private leases: Held[] = [];
  /** The permits of every lease in `leases`, ended or not. */
  private held = 0;
  /** The latest time written at: an earlier reading counts as no time passing. */
  private last = -Infinity;

  /**
   * @param limit the most permits held at once: a safe integer of at least 1.
   * @throws TypeError when `limit` or `leaseMs` is not a number; RangeError, naming the value, when
   * `limit` is not a safe integer of at least 1 or `leaseMs` not a whole number of ms from 1 to 2^42 nor `Infinity`.
   */
  constructor(limit: number, options: ConcurrencyOptions = {}) {
    super();
    this.limit = integerIn('limit', limit, 1, Number.MAX_SAFE_INTEGER);
    if (options === null || typeof options !== 'object') throw typeError(`ratekeeper: Concurrency options must be an object, got ${describe(options)}`);
    const { leaseMs = 60_000 } = options;
    this.leaseMs = leaseMs === Infinity ? Infinity : integerIn('leaseMs', leaseMs, 1, MAX_LEASE_MS);
  }

  /** Throws: a grant taken this way could never be released. Use `reserve`. */
  tryAcquire(_nowMs: number, _permits?: number): Decision {
    throw unreleasable('tryAcquire');
  }

  /** Throws: a cost that already happened holds nothing in flight. */
  charge(_nowMs: number, _permits: number): Decision {
    throw unreleasable('charge');
  }

  peek(nowMs: number, permits = 1): Decision {
    checkTime(nowMs);
    if (permits !== 0) checkPermits(permits, this.limit);
    const now = nowMs > this.last ? nowMs : this.last;
    const ended = this.endedAt(now);
    const free = this.limit - this.heldAfter(ended);
    const resetAfterMs = this.resetAfter(now, ended, 0);
    if (permits === 0) return allow(this.limit, free > 0 ? free : 0, resetAfterMs);
    if (permits <= free) return allow(this.limit, free - permits, this.resetAfter(now, ended, this.leaseMs));
    return reject(this.limit, free > 0 ? free : 0, this.retryAfter(now, ended, permits - free), resetAfterMs);
  }

  /** Grants `permits` and holds them until released, or until `leaseMs` from now; the receipt is the lease. */
  reserve(nowMs: number, permits = 1): Reserved {
    const decision = this.peek(nowMs, permits);
    if (!decision.allowed) return { decision, receipt: undefined };
    const now = nowMs > this.last ? nowMs : this.last;
    this.drop(this.endedAt(now));
    const lease = new Held(permits, now + this.leaseMs);
    this.place(lease);
    this.held += permits;
    this.last = now;
    return { decision, receipt: lease };
  }

  /** Releases up to `permits` of a lease still held (the rest stays held); nothing for any other receipt. */
  refund(_nowMs: number, receipt: Receipt, permits: number): void {
    for (const lease of leasesIn(receipt)) {
      const i = this.leases.indexOf(lease);
      if (i === -1) continue;
      const given = Math.min(permits, lease.permits);
      lease.permits -= given;
      this.held -= given;
      if (lease.permits === 0) this.leases.splice(i, 1);
    }
  }

  /**
   * Releases what a reservation holds: its permits are free at once. A receipt whose lease has
   * ended, was released, or is not this state's releases nothing; returns whether one was held.
   */
  release(nowMs: number, receipt: Receipt): boolean {
    checkTime(nowMs);
    const now = nowMs > this.last ? nowMs : this.last;
    // A lone lease, the common case, without the array a composite's receipt is read through.
    if (receipt instanceof Held) return this.releaseOne(receipt, now);
    let released = false;
    for (const lease of leasesIn(receipt)) if (this.releaseOne(lease, now)) released = true;
    return released;
  }

  /** Releases one lease if this state holds it; true when it had not ended. */
  private releaseOne(lease: Held, now: number): boolean {
    // Leases end roughly in grant order, and the oldest are released first: found near the front.
    const i = this.leases.indexOf(lease);
    if (i === -1) return false;
    this.held -= lease.permits;
    this.leases.splice(i, 1);
    return lease.end > now;
  }

  /**
   * Holds a lease still held for `ms` from now (whole ms from 1 to 2^42, or `Infinity`) instead of
   * until its end: for a holder that knows it needs longer (a streamed reply). Returns false,
   * changing nothing, when the lease has ended or was released: its permits may be someone else's now.
   * @throws RangeError when `ms` is out of range.
   */
  extend(nowMs: number, receipt: Receipt, ms: number): boolean {
    checkTime(nowMs);
    checkLeaseMs('ms', ms);
    const now = nowMs > this.last ? nowMs : this.last;
    let extended = false;
    for (const lease of leasesIn(receipt)) {
      const i = this.leases.indexOf(lease);
      if (i === -1 || lease.end <= now) continue;
      this.leases.splice(i, 1);
      lease.end = now + ms;
      this.place(lease);
      this.last = now;
      extended = true;
    }
    return extended;
  }

  isIdle(nowMs: number): boolean {
    const last = this.leases[this.leases.length - 1];
    return last === undefined || last.end <= nowMs;
  }

  /** A summary for logs and `JSON.stringify`: the algorithm and its settings (never the leases). */
  override toJSON(): { algorithm: 'concurrency'; limit: number; leaseMs: number | null } {
    // JSON has no Infinity: a lease that never ends prints as null.
    return { algorithm: 'concurrency', limit: this.limit, leaseMs: this.leaseMs === Infinity ? null : this.leaseMs };
  }

  /**
   * Takes over the leases `others` still hold at `nowMs`, each ending when it would have: what a
   * reconfiguration carries over (read by shape in limiter/carry-over.ts). A lease may then be held
   * by two states until one of them releases it: a release is by the lease itself, in every state.
   */
  private adopt(others: readonly Concurrency[], nowMs: number): void {
    for (const other of others) {
      for (const lease of other.leases) {
        if (lease.end <= nowMs || this.leases.includes(lease)) continue;
        this.place(lease);
        this.held += lease.permits;
      }
      if (other.last > this.last) this.last = other.last;
    }
  }

  /** How many leases, from the first, have ended at `now`. */
  private endedAt(now: number): number {
    let i = 0;
    while (i < this.leases.length && (this.leases[i] as Held).end <= now) i++;
    return i;
  }

  /** The permits held once the first `ended` leases are gone. */
  private heldAfter(ended: number): number {
    let held = this.held;
    for (let i = 0; i < ended; i++) held -= (this.leases[i] as Held).permits;
    return held;
  }

  /** Forgets the first `ended` leases, which have ended. */
  private drop(ended: number): void {
    if (ended === 0) return;
    this.held = this.heldAfter(ended);
    this.leases.splice(0, ended);
  }

  /** Puts a lease in end order, after those ending at the same time; almost always at the back. */
  private place(lease: Held): void {
    let i = this.leases.length;
    while (i > 0 && (this.leases[i - 1] as Held).end > lease.end) i--;
    if (i === this.leases.length) this.leases.push(lease);
    else this.leases.splice(i, 0, lease);
  }

  /** The time until `needed` more permits are free by leases ending (from the `ended`-th on), at most 2^42. */
  private retryAfter(now: number, ended: number, needed: number): number {
    let freed = 0;
    for (let i = ended; i < this.leases.length; i++) {
      const lease = this.leases[i] as Held;
      freed += lease.permits;
      if (freed >= needed) return Math.max(1, Math.min(MAX_LEASE_MS, Math.ceil(lease.end - now)));
    }
    // Held past the limit by leases carried over from a larger limit: never reached here for a
    // request within the limit, since every lease ends; kept whole for a clock gone wrong.
    return MAX_LEASE_MS;
  }

  /** The time until every lease held ends, a new one of `leaseMs` included; at most 2^42. */
  private resetAfter(now: number, ended: number, leaseMs: number): number {
    const last = ended < this.leases.length ? (this.leases[this.leases.length - 1] as Held).end - now : 0;
    const longest = last > leaseMs ? last : leaseMs;
    return Math.min(MAX_LEASE_MS, Math.ceil(longest));
  }
}

/** Returns `ms` if it is a lease length: whole ms from 1 to 2^42, or `Infinity`; throws naming it otherwise. */
export function checkLeaseMs(name: string, ms: unknown): number {
  if (ms === Infinity) return ms;
  return integerIn(name, ms, 1, MAX_LEASE_MS);
}

/** The leases in a receipt: a `Concurrency` receipt, or a composite's array of its parts' receipts. */
function leasesIn(receipt: Receipt): readonly Held[] {
  if (receipt instanceof Held) return [receipt];
  return Array.isArray(receipt) ? receipt.filter((part): part is Held => part instanceof Held) : [];
}

/** The error of `tryAcquire` or `charge` on a state that holds in flight. */
export function unreleasable(operation: 'tryAcquire' | 'charge' | 'acquire'): TypeError {
  return typeError(
    `ratekeeper: ${operation} cannot be used with a Concurrency limit: its grant would be held with no reservation to release it; use reserve() or lease() and settle`,
  );
}

/** What an in-flight part does beyond a rate's accounting, read by shape (a Concurrency of either build). */
export interface Holding extends AccountingAlgorithm {
  release(nowMs: number, receipt: Receipt): boolean;
  extend(nowMs: number, receipt: Receipt, ms: number): boolean;
}

/** Whether a state (or a part) holds what it grants in flight. */
export function isHolding(state: unknown): state is Holding {
  const s = state as Partial<Holding> | null;
  return typeof s?.release === 'function' && typeof s.extend === 'function' && typeof s.reserve === 'function';
}
