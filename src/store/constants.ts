import { DEBT_LIMITS, MAX_RECEIPTS, usageBound } from '../algorithms/accounting';

// The numbers every store's scripts and SQL share with the in-memory algorithms. Lua and SQL get
// them interpolated from here, so a bound changed here changes everywhere at once.
export { DEBT_LIMITS, MAX_RECEIPTS, usageBound };

/** 2^53 − 1: no stored count or time passes it, so every number a store keeps stays exact. */
export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * How long a stored key outlives the moment it is as new, in ms: a quarter of the window, at most
 * a minute. Expiries run on the server's clock while a caller's `clock` may lag it; without this
 * margin a key could vanish while, by the caller's clock, it still counted something. It also lets
 * a Redis key's expiry be set again only once in a while (see the Lua token bucket).
 */
export function expirySlackMs(windowMs: number): number {
  return Math.min(Math.floor(windowMs / 4), 60_000);
}
