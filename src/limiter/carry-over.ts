import type { PeekableAlgorithm, RateLimitAlgorithm } from '../algorithms/algorithm';
import { partsOf } from '../algorithms/composite';

/**
 * Moves what a key has used from its state under the old rule into a fresh state under the new
 * one, at the moment of the switch; returns false, changing nothing, when either state cannot be
 * read without spending (an algorithm without `peek`).
 *
 * What is carried is the permits the old state still counts as used: its limit minus the whole
 * permits it has available now. They are spent in the new state at the switch, capped at the new
 * limit, so nothing already spent is forgiven and a raised limit is available at once. Composites
 * with as many parts are carried part by part, so the hourly part keeps its hour when only the
 * per-second part changes. When parts are added or removed (a single algorithm counting as one
 * part), each new part takes what the old part of the same kind and limit had used, and a new
 * part with no such match takes the most any old part had used: whatever the binding part was,
 * the most-used part's count is never forgiven.
 */
export function carryOver(previous: RateLimitAlgorithm, next: RateLimitAlgorithm, nowMs: number): boolean {
  if (!isPeekable(previous) || !isPeekable(next)) return false;
  const before = partsOf(previous) ?? [previous];
  const after = partsOf(next) ?? [next];
  const used = before.map((part) => usedIn(part, nowMs));
  if (before.length === after.length) {
    after.forEach((part, i) => spend(part, used[i] as number, nowMs));
    return true;
  }
  const most = Math.max(...used);
  const matched = new Set<number>();
  for (const part of after) {
    const limit = part.peek(nowMs, 1).limit;
    const i = before.findIndex((old, j) => !matched.has(j) && old.constructor === part.constructor && old.peek(nowMs, 1).limit === limit);
    if (i >= 0) matched.add(i);
    spend(part, i >= 0 ? (used[i] as number) : most, nowMs);
  }
  return true;
}

/** The permits a state counts as used now: its limit minus the whole permits it has available. */
function usedIn(state: PeekableAlgorithm, nowMs: number): number {
  const probe = state.peek(nowMs, 1);
  return probe.limit - (probe.allowed ? probe.remaining + 1 : probe.remaining);
}

function spend(state: PeekableAlgorithm, used: number, nowMs: number): void {
  const permits = Math.min(used, state.peek(nowMs, 1).limit);
  if (permits > 0) state.tryAcquire(nowMs, permits);
}

function isPeekable(state: RateLimitAlgorithm): state is PeekableAlgorithm {
  // A factory may hand back anything (null included): such a state is not carried over, never read.
  return typeof (state as Partial<PeekableAlgorithm> | null)?.peek === 'function';
}
