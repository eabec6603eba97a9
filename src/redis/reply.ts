import { allow, type Decision, reject } from '../core/decision';
import { coded } from '../core/errors';
import { describe } from '../core/validate';

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

/**
 * Reads one entry in place, character by character: this runs once per decision, and splitting it
 * into fields cost more than the rest of the reply's handling. A number is what '%.17g' writes for
 * a whole number below 2^53, plain decimal digits; anything else (a sign, an exponent, a fraction,
 * a stray space) is not a reply of ours.
 */
function readEntry(entry: unknown, limit: number): Decision | Error | undefined {
  if (typeof entry !== 'string') return undefined;
  if (entry.startsWith('E ')) return new Error(`ratekeeper: Redis failed on this key: ${entry.slice(2)}`);
  const allowed = entry.startsWith('A ');
  if (!allowed && !entry.startsWith('R ')) return undefined;
  let a = 0;
  let b = 0;
  let c = 0;
  let fields = 0;
  let value = 0;
  let digits = 0;
  // The end of the entry closes the last field as a space does.
  for (let i = 2; i <= entry.length; i++) {
    const code = i === entry.length ? SPACE : entry.charCodeAt(i);
    if (code >= ZERO && code <= NINE) {
      value = value * 10 + (code - ZERO);
      digits++;
      continue;
    }
    // Past 2^53 - 1 a double no longer tells every whole number apart; nothing we write gets there.
    if (code !== SPACE || digits === 0 || value > Number.MAX_SAFE_INTEGER) return undefined;
    if (fields === 0) a = value;
    else if (fields === 1) b = value;
    else if (fields === 2) c = value;
    else return undefined;
    fields++;
    value = 0;
    digits = 0;
  }
  if (allowed) return fields === 2 ? allow(limit, a, b) : undefined;
  // A refusal waits at least 1 ms; a retry time of 0 is not a refusal, whatever sent it.
  return fields === 3 && b >= 1 ? reject(limit, a, b, c) : undefined;
}

const SPACE = 32;
const ZERO = 48;
const NINE = 57;

function unexpected(reply: unknown): Error {
  return coded(new Error(`ratekeeper: unexpected reply from Redis: ${describe(reply)}`), 'ERR_RATEKEEPER_STORE_REPLY');
}

/** One entry of a reply (see {@link readReply}): its decision, or the error of its key. */
export function readDecision(entry: unknown, limit: number): Decision | Error {
  return readEntry(entry, limit) ?? unexpected(entry);
}

/** The error of a reply no script of ours sends (see protocol.ts). */
export function unexpectedReply(reply: unknown): Error {
  return unexpected(reply);
}
