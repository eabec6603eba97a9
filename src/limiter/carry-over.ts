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
 * per-second part changes. Parts are matched by kind, not position: each new part takes what the
 * old part of the same kind and limit had used; with as many parts, a part left unmatched then takes
 * the old part of its kind, else the one in its place (a limit changed in place); and a new part
 * still without a match takes the most any old part had used (parts added or removed, a single
 * algorithm counting as one part). Listing the same parts in another order forgives nothing, and
 * whatever the binding part was, the most-used part's count is never forgiven.
 */
export function carryOver(previous: RateLimitAlgorithm, next: RateLimitAlgorithm, nowMs: number): boolean {
  if (!isPeekable(previous) || !isPeekable(next)) return false;
  const before = partsOf(previous) ?? [previous];
  const after = partsOf(next) ?? [next];
  const used = before.map((part) => usedIn(part, nowMs));
  const most = Math.max(...used);
  const source = matchParts(before, after, nowMs);
  after.forEach((part, i) => spend(part, used[source[i] ?? -1] ?? most, nowMs));
  return true;
}

/** For each new part, the index of the old part it continues (see `carryOver`), or undefined. */
function matchParts(before: readonly PeekableAlgorithm[], after: readonly PeekableAlgorithm[], nowMs: number): (number | undefined)[] {
  const limit = (part: PeekableAlgorithm) => part.peek(nowMs, 1).limit;
  const source: (number | undefined)[] = after.map(() => undefined);
  const taken = new Set<number>();
  const pass = (same: (old: PeekableAlgorithm, part: PeekableAlgorithm, j: number, i: number) => boolean) => {
    after.forEach((part, i) => {
      if (source[i] !== undefined) return;
      const j = before.findIndex((old, k) => !taken.has(k) && same(old, part, k, i));
      if (j === -1) return;
      taken.add(j);
      source[i] = j;
    });
  };
  pass((old, part) => old.constructor === part.constructor && limit(old) === limit(part));
  if (before.length === after.length) {
    pass((old, part) => old.constructor === part.constructor);
    pass((_old, _part, j, i) => j === i);
  }
  return source;
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
