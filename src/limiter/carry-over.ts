import type { AccountingAlgorithm, PeekableAlgorithm, RateLimitAlgorithm } from '../algorithms/algorithm';
import { partsOf } from '../algorithms/composite';
import { type Holding, isHolding } from '../algorithms/concurrency';

/**
 * Moves what a key has used from its state under the old rule into a fresh state under the new
 * one, at the moment of the switch; returns false, changing nothing, when either state cannot be
 * read without spending (an algorithm without `peek`).
 *
 * What is carried is the permits the old state still counts as used, debt included: its limit
 * minus the whole permits it has available now, and for a key in debt the debt too (read from each
 * ratekeeper algorithm; a custom one tells only what it has available). They are charged to the new
 * state at the switch, so nothing spent is forgiven up to the new rule's debt bound (twice its
 * limit, as any charge), a raised limit is available at once, and switching A to B and back at one
 * reading leaves a key as it was whenever what it used fits B's bound. Composites
 * with as many parts are carried part by part, so the hourly part keeps its hour when only the
 * per-second part changes. Parts are matched by kind, not position: each new part takes what the
 * old part of the same kind and limit had used; with as many parts, a part left unmatched then takes
 * the old part of its kind, else the one in its place (a limit changed in place); and a new part
 * still without a match takes the most any old part had used (parts added or removed, a single
 * algorithm counting as one part). Listing the same parts in another order forgives nothing, and
 * whatever the binding part was, the most-used part's count is never forgiven.
 *
 * In-flight parts (`Concurrency`) are not rates and are carried apart: each new one takes over every
 * lease an old one still holds, each ending when it would have and released by its reservation as
 * before; with no in-flight part left, the leases are dropped.
 */
export function carryOver(previous: RateLimitAlgorithm, next: RateLimitAlgorithm, nowMs: number): boolean {
  if (!isPeekable(previous) || !isPeekable(next)) return false;
  const [held, before] = split(partsOf(previous) ?? [previous]);
  const [holding, after] = split(partsOf(next) ?? [next]);
  for (const part of holding) adopt(part, held, nowMs);
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

/**
 * The whole permits a state counts as used now, debt included, from the reading every ratekeeper
 * algorithm keeps for this (`usedAt`); else its limit minus the whole permits it has available.
 */
function usedIn(state: PeekableAlgorithm, nowMs: number): number {
  const { usedAt } = state as { usedAt?: unknown };
  if (typeof usedAt === 'function') return (usedAt as (nowMs: number) => number).call(state, nowMs);
  const probe = state.peek(nowMs, 1);
  return probe.limit - (probe.allowed ? probe.remaining + 1 : probe.remaining);
}

/**
 * Spends `used` in a fresh state: charged (into debt, up to its bound), or without `charge` granted
 * up to its limit. A wide token bucket in debt may count past 2^53 - 1, which no charge takes, nor
 * any bound lets in: charged as 2^53 - 1, the same once bounded.
 */
function spend(state: PeekableAlgorithm, used: number, nowMs: number): void {
  if (used <= 0) return;
  if (typeof (state as Partial<AccountingAlgorithm>).charge === 'function') (state as AccountingAlgorithm).charge(nowMs, Math.min(used, Number.MAX_SAFE_INTEGER));
  else state.tryAcquire(nowMs, Math.min(used, state.peek(nowMs, 1).limit));
}

/** The in-flight parts and the rates, apart. */
function split(parts: readonly PeekableAlgorithm[]): [Holding[], PeekableAlgorithm[]] {
  return [parts.filter(isHolding), parts.filter((part) => !isHolding(part))];
}

/** Gives an in-flight part the leases the old ones hold (read by shape: `Concurrency.adopt`). */
function adopt(part: Holding, from: readonly Holding[], nowMs: number): void {
  const { adopt: take } = part as { adopt?: unknown };
  if (typeof take === 'function') (take as (others: readonly Holding[], nowMs: number) => void).call(part, from, nowMs);
}

function isPeekable(state: RateLimitAlgorithm): state is PeekableAlgorithm {
  // A factory may hand back anything (null included): such a state is not carried over, never read.
  return typeof (state as Partial<PeekableAlgorithm> | null)?.peek === 'function';
}
