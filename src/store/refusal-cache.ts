import { type Rejected, reject } from '../core/decision';

interface Refusal {
  /** When the refused request would first be allowed, on the limiter's local time line. */
  readonly until: number;
  readonly permits: number;
  readonly remaining: number;
  /** When the key would be as new, on the same time line. */
  readonly resetAt: number;
  /** When the call that was refused left, on the same time line. */
  readonly sentAt: number;
  /** Until when the entry answers: `until`, or `maxMs` after `sentAt` if that comes first. */
  readonly expires: number;
}

/**
 * Remembers, per key, until when a request was refused, so that a client hammering a refused key
 * costs no round trip. Other servers' traffic can only delay a refusal's end, never bring it
 * forward, and a larger request is refused at least as long; so a request for at least as many
 * permits before `until` is refused without asking Redis. But another server's `reset` or refund
 * does bring it forward, unseen here: so an entry answers for at most `maxMs` after its call left,
 * and then Redis is asked again. Forgetting an entry only costs a round trip, so the table is
 * bounded by dropping its oldest entry.
 */
export class RefusalCache {
  readonly #refusals = new Map<string, Refusal>();
  readonly #maxKeys: number;
  readonly #maxMs: number;

  constructor(maxKeys: number, maxMs: number) {
    this.#maxKeys = maxKeys;
    this.#maxMs = maxMs;
  }

  /** The refusal for `permits` at `now` if one is known, with `retryAfterMs` counted down to its end. */
  get(key: string, permits: number, now: number, limit: number): Rejected | undefined {
    const refusal = this.#refusals.get(key);
    if (refusal === undefined) return undefined;
    // A clock read behind the call cannot tell how old the entry is: it vouches for nothing.
    if (now >= refusal.expires || now < refusal.sentAt) {
      this.#refusals.delete(key);
      return undefined;
    }
    if (permits < refusal.permits) return undefined;
    return reject(limit, refusal.remaining, Math.ceil(refusal.until - now), Math.ceil(refusal.resetAt - now));
  }

  /** Forgets what is known of `key`: a reset or a refund may have made room. */
  forget(key: string): void {
    this.#refusals.delete(key);
  }

  /**
   * Records a refusal decided by Redis for a call sent at `sentAt`. Counting from the moment the call
   * left, not from when the answer came back, ends the local refusal no later than Redis would.
   */
  remember(key: string, permits: number, sentAt: number, decision: Rejected): void {
    this.#refusals.delete(key);
    if (this.#refusals.size >= this.#maxKeys) this.#refusals.delete(this.#refusals.keys().next().value as string);
    this.#refusals.set(key, {
      until: sentAt + decision.retryAfterMs,
      permits,
      remaining: decision.remaining,
      resetAt: sentAt + decision.resetAfterMs,
      sentAt,
      expires: sentAt + Math.min(decision.retryAfterMs, this.#maxMs),
    });
  }
}
