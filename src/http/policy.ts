import type { Decision } from '../core/decision';
import { rangeError, typeError } from '../core/errors';
import { ceilDiv } from '../core/exact';
import { assertNumber, describe } from '../core/validate';
import { windowOf } from '../store/decision-window';
import { assertObject, positiveNumber } from './check';
import { policyName, sfInteger } from './structured-field';

/**
 * One policy of a composite limit: its decision for this request, its name and its window.
 *
 * @example
 * ```ts
 * import type { PolicyDecision } from 'ratekeeper/http';
 * const daily: PolicyDecision = {
 *   name: 'daily',
 *   windowMs: 86_400_000,
 *   decision: { allowed: true, limit: 1000, remaining: 3, retryAfterMs: 0, resetAfterMs: 3_600_000 },
 * };
 * ```
 */
export interface PolicyDecision {
  readonly decision: Decision;
  /** Non-empty printable ASCII, unique among the policies. */
  readonly name: string;
  /** The policy's window in ms, as `RateLimitHeaderOptions.windowMs` (advertised as `w`). */
  readonly windowMs?: number | undefined;
}

/** A policy reduced to the integers the fields carry. */
export interface Policy {
  readonly name: string;
  readonly quota: number;
  readonly remaining: number;
  /** `t` / reset, in seconds: `retryAfterMs` when refused, `resetAfterMs` when allowed. */
  readonly seconds: number;
  readonly window: number | undefined;
  readonly refused: boolean;
}

/** Reduces a composite limit's policies, whose names must differ so that `RateLimit` can point at one. */
export function policiesOf(list: readonly PolicyDecision[]): Policy[] {
  if (list.length === 0) throw rangeError('ratekeeper: `policies` must hold at least one policy, got an empty array');
  const seen = new Set<string>();
  return list.map((entry, i) => {
    const at = `policies[${i}].`;
    assertObject(`\`policies[${i}]\``, entry);
    const policy = policyOf(entry.decision, entry.name, entry.windowMs, at);
    if (seen.has(policy.name)) {
      throw rangeError(`ratekeeper: \`${at}name\` repeats ${describe(policy.name)}; each policy needs its own name`);
    }
    seen.add(policy.name);
    return policy;
  });
}

/**
 * Reduces one decision to whole numbers: quota and remaining rounded down, times rounded up to
 * seconds, so that a client reading them is never told too much or too early. `at` prefixes the
 * names in error messages (`policies[1].`). A decision of a store limiter whose rule is a function
 * of the key advertises its own key's window, whatever `windowMs` says: the limiter knows it better.
 */
export function policyOf(decision: Decision, name: unknown, windowMs: unknown, at: string): Policy {
  assertObject(`\`${at}decision\``, decision);
  windowMs = windowOf(decision) ?? windowMs;
  const allowed: unknown = decision.allowed;
  if (typeof allowed !== 'boolean') {
    throw typeError(`ratekeeper: \`${at}decision.allowed\` must be a boolean, got ${describe(allowed)}`);
  }
  const refused = !allowed;
  return {
    name: policyName(`${at}name`, name),
    quota: sfInteger(Math.floor(amount(`${at}decision.limit`, decision.limit))),
    remaining: sfInteger(Math.floor(amount(`${at}decision.remaining`, decision.remaining))),
    seconds: sfInteger(
      refused
        ? ceilDiv(amount(`${at}decision.retryAfterMs`, decision.retryAfterMs), 1000)
        : ceilDiv(amount(`${at}decision.resetAfterMs`, decision.resetAfterMs), 1000),
    ),
    window: windowMs === undefined ? undefined : sfInteger(Math.max(1, ceilDiv(positiveNumber(`${at}windowMs`, windowMs), 1000))),
    refused,
  };
}

/** Checks a decision field: a decision from a custom limiter must still be a finite amount of at least 0. */
function amount(name: string, value: unknown): number {
  assertNumber(name, value);
  if (!(value >= 0 && value < Infinity)) throw rangeError(`ratekeeper: \`${name}\` must be a finite number of at least 0, got ${value}`);
  return value;
}

/**
 * True when `a` is closer to refusing than `b`: a refusing policy first, then the fewer remaining
 * (draft-7 §4: "the time window with the lower remaining"), then the longer wait.
 */
export function tighter(a: Policy, b: Policy): boolean {
  if (a.refused !== b.refused) return a.refused;
  if (a.remaining !== b.remaining) return a.remaining < b.remaining;
  return a.seconds > b.seconds;
}
