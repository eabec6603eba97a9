import { floorDiv, mulDivMod } from '../core/exact';

/**
 * The arithmetic of a wide token bucket (its capacity in scaled units past 2^52, see `Plan.wide` in
 * ./token-bucket.ts): whole tokens and the units toward the next kept apart, each below 2^53, with
 * exact wide products. Tokens go below zero in debt, down to `-limit`.
 */
interface WideUnits {
  readonly limit: number;
  readonly windowMs: number;
  readonly perMs: number;
  readonly perToken: number;
}

/**
 * Whole tokens and units toward the next after `elapsed` ms of refill from `tokens` and `partial`,
 * capped at a full bucket. A debt is repaid first, so that no quotient passes the limit.
 */
export function refill(plan: WideUnits, tokens: number, partial: number, elapsed: number): [number, number] {
  const { limit, windowMs, perMs, perToken } = plan;
  if (tokens < 0) {
    const [wait, above, rest] = repay(plan, tokens, partial);
    if (elapsed < wait) {
      const [more, left] = mulDivMod(elapsed, perMs, partial, perToken);
      return [tokens + more, left];
    }
    [tokens, partial, elapsed] = [above, rest, elapsed - wait];
  }
  // A whole window refills any bucket out of debt; below it the quotient is under `limit`, as mulDivMod needs.
  if (tokens === limit || elapsed >= windowMs) return [limit, 0];
  const [more, left] = mulDivMod(elapsed, perMs, partial, perToken);
  return tokens + more >= limit ? [limit, 0] : [tokens + more, left];
}

/** Whole ms until `tokens` (with `partial` units toward the next) reach `wanted`: (wanted - tokens) · perToken - partial units, at perMs a ms. */
export function until(plan: WideUnits, wanted: number, tokens: number, partial: number): number {
  if (tokens >= wanted) return 0;
  if (tokens < 0) {
    const [wait, above, rest] = repay(plan, tokens, partial);
    return wait + until(plan, wanted, above, rest);
  }
  const { perMs, perToken } = plan;
  const [q, r] = mulDivMod(wanted - tokens - 1, perToken, perToken - partial, perMs);
  return r > 0 ? q + 1 : q;
}

/**
 * The level `tokens`, `partial` raised by a refund of `permits` whose bound is the highest level
 * since its grant, `topTokens`, `topPartial` (at least as high as this one): `permits` whole tokens
 * while fewer than that level is short of full; else that shortfall exactly, which takes that level
 * to full and leaves a lower one as far below full as it was below it. Every sum below is formed so
 * that no operand passes 2^53 (tokens run from -limit to limit).
 */
export function raise(plan: WideUnits, tokens: number, partial: number, permits: number, topTokens: number, topPartial: number): [number, number] {
  const { limit, perToken } = plan;
  // Past 2^53 `limit - topTokens` rounds, but stays above every safe `permits`.
  if (permits < limit - topTokens) return [tokens + permits, partial];
  const whole = topTokens >= 0 ? tokens + (limit - topTokens) : tokens - topTokens + limit;
  return partial >= topPartial ? [whole, partial - topPartial] : [whole - 1, partial - topPartial + perToken];
}

/**
 * For a bucket in debt: the whole ms until refill has repaid it, and the whole tokens and units it
 * then holds (less than one ms of refill, so below the limit).
 */
function repay(plan: WideUnits, tokens: number, partial: number): [number, number, number] {
  const { perMs, perToken } = plan;
  // The debt, (-tokens - 1) · perToken + (perToken - partial) units, is q ms of refill and r units.
  const [q, r] = mulDivMod(-tokens - 1, perToken, perToken - partial, perMs);
  const above = r > 0 ? perMs - r : 0;
  const whole = floorDiv(above, perToken);
  return [r > 0 ? q + 1 : q, whole, above - whole * perToken];
}
