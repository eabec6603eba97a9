import { allow, type Decision, reject } from '../core/decision';
import { coded } from '../core/errors';
import { Rule } from '../core/rule';
import { describe } from '../core/validate';

/**
 * Checks a reply of numbers for `count` decisions: three finite numbers each (remaining,
 * retryAfterMs, resetAfterMs), so that a wrongly wired adapter or a foreign script is a store
 * error rather than a wrong answer.
 */
export function checkReply(reply: unknown, count: number, store: string): number[] {
  if (Array.isArray(reply) && reply.length === 3 * count) {
    const numbers = reply.map(Number);
    if (numbers.every(Number.isFinite)) return numbers;
  }
  throw unexpectedReply(reply, store);
}

/** The error of a reply none of ours is (a wrongly wired adapter, a foreign script or function): a store error. */
export function unexpectedReply(reply: unknown, store: string): Error {
  return coded(new Error(`ratekeeper: unexpected reply from ${store}: ${describe(reply)}`), 'ERR_RATEKEEPER_STORE_REPLY');
}

/** The `index`-th decision of a checked reply; a refusal always waits at least 1 ms, so 0 marks an allowance. */
export function toDecision(numbers: readonly number[], index: number, limit: number): Decision {
  const remaining = numbers[3 * index]!;
  const retryAfterMs = numbers[3 * index + 1]!;
  const resetAfterMs = numbers[3 * index + 2]!;
  return retryAfterMs === 0 ? allow(limit, remaining, resetAfterMs) : reject(limit, remaining, retryAfterMs, resetAfterMs);
}

/** The rule a reply names (a key's own, limit and windowMs), or the store error of a reply none of ours is. */
export function namedRule(limit: number, windowMs: number, reply: unknown, store: string): Rule {
  try {
    return new Rule(limit, windowMs);
  } catch {
    throw unexpectedReply(reply, store);
  }
}
