import type { Decision, KeyedRateLimiter, Reservation } from '../../src/index';

/**
 * What `admit` must do, done by hand: reserve each part in order; at the first refusal, answer the
 * rest by `peek` and cancel the parts granted before it.
 */
export function oneByOne(parts: readonly { limiter: KeyedRateLimiter; key: string; permits: number }[]): { decisions: Decision[]; held: Reservation[]; refused: boolean } {
  const decisions: Decision[] = [];
  const held: Reservation[] = [];
  let refused = false;
  for (const { limiter, key, permits } of parts) {
    if (refused) {
      decisions.push(limiter.peek(key, permits));
      continue;
    }
    const reservation = limiter.reserve(key, permits);
    decisions.push(reservation.decision);
    if (reservation.decision.allowed) held.push(reservation);
    else refused = true;
  }
  if (refused) for (const reservation of [...held].reverse()) reservation.cancel();
  return { decisions, held, refused };
}
