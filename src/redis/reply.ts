import { allow, type Decision, reject } from '../core/decision';
import { coded } from '../core/errors';
import { describe } from '../core/validate';

/**
 * Checks a PostgreSQL reply for `count` decisions (the Redis scripts' replies are read by
 * {@link readReply}): three finite numbers each (remaining,
 * retryAfterMs, resetAfterMs), so that a wrongly wired adapter or a foreign script is a store
 * error rather than a wrong answer.
 */
export function checkReply(reply: unknown, count: number, store = 'Redis'): number[] {
  if (Array.isArray(reply) && reply.length === 3 * count) {
    const numbers = reply.map(Number);
    if (numbers.every(Number.isFinite)) return numbers;
  }
  throw coded(new Error(`ratekeeper: unexpected reply from ${store}: ${describe(reply)}`), 'ERR_RATEKEEPER_STORE_REPLY');
}

/** The `index`-th decision of a checked reply; a refusal always waits at least 1 ms, so 0 marks an allowance. */
export function toDecision(numbers: readonly number[], index: number, limit: number): Decision {
  const remaining = numbers[3 * index]!;
  const retryAfterMs = numbers[3 * index + 1]!;
  const resetAfterMs = numbers[3 * index + 2]!;
  return retryAfterMs === 0 ? allow(limit, remaining, resetAfterMs) : reject(limit, remaining, retryAfterMs, resetAfterMs);
}

/**
 * Reads a script's reply for `count` decisions: one string per decision, `A remaining
 * resetAfterMs`, `R remaining retryAfterMs resetAfterMs` or `E message` (see batchScript). Each
 * entry becomes its decision, or the error of its own key. A reply of any other shape (a wrongly
 * wired adapter, a foreign script) throws, and is a store error for every call of the batch.
 */
export function readReply(reply: unknown, count: number, limit: number): (Decision | Error)[] {
  if (!Array.isArray(reply) || reply.length !== count) throw unexpected(reply);
  const results: (Decision | Error)[] = [];
  for (const entry of reply) {
    const result = readEntry(entry, limit);
    if (result === undefined) throw unexpected(entry);
    results.push(result);
  }
  return results;
}

function readEntry(entry: unknown, limit: number): Decision | Error | undefined {
  if (typeof entry !== 'string') return undefined;
  if (entry.startsWith('E ')) return new Error(`ratekeeper: Redis failed on this key: ${entry.slice(2)}`);
  const fields = entry.split(' ');
  const numbers = fields.slice(1).map(Number);
  if (!numbers.every((n) => Number.isInteger(n) && n >= 0)) return undefined;
  const [a, b, c] = numbers as [number, number, number];
  if (fields[0] === 'A' && numbers.length === 2) return allow(limit, a, b);
  // A refusal waits at least 1 ms; a retry time of 0 is not a refusal, whatever sent it.
  if (fields[0] === 'R' && numbers.length === 3 && b >= 1) return reject(limit, a, b, c);
  return undefined;
}

function unexpected(reply: unknown): Error {
  return coded(new Error(`ratekeeper: unexpected reply from Redis: ${describe(reply)}`), 'ERR_RATEKEEPER_STORE_REPLY');
}
