import type { Decision } from '../core/decision';

// The window each decision was counted under, for decisions of a limiter whose rule is a function
// of the key: the HTTP middleware advertises it (`w`). Kept beside the decision, not in it, so a
// decision stays deep-equal to the in-memory twin's. The map is registered globally, so the ESM and
// CommonJS copies of ratekeeper, and the separately bundled entry points, share it.
const REGISTRY = Symbol.for('ratekeeper.decisionWindows');
const windows = ((globalThis as Record<symbol, unknown>)[REGISTRY] ??= new WeakMap<Decision, number>()) as WeakMap<Decision, number>;

/** Notes that `decision` was counted under a window of `windowMs`. */
export function noteWindow(decision: Decision, windowMs: number): void {
  windows.set(decision, windowMs);
}

/** The window `decision` was counted under, when its limiter's rule is a function of the key. */
export function windowOf(decision: Decision): number | undefined {
  return windows.get(decision);
}
