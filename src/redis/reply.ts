import { allow, type Decision, reject } from '../core/decision';
import { unexpectedReply } from '../store/reply';

/**
 * Reads one entry in place, character by character: this runs once per decision, and splitting it
 * into fields cost more than the rest of the reply's handling. A number is what '%.17g' writes for
 * a whole number below 2^53, plain decimal digits; anything else (a sign, an exponent, a fraction,
 * a stray space) is not a reply of ours.
 */
function readEntry(entry: unknown, limit: number, withLimit: boolean): Decision | Error | undefined {
  if (typeof entry !== 'string') return undefined;
  if (entry.startsWith('E ')) return new Error(`ratekeeper: Redis failed on this key: ${entry.slice(2)}`);
  const allowed = entry.startsWith('A ');
  if (!allowed && !entry.startsWith('R ')) return undefined;
  let a = 0;
  let b = 0;
  let c = 0;
  let d = 0;
  let e = 0;
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
    else if (fields === 3) d = value;
    else if (fields === 4) e = value;
    else return undefined;
    fields++;
    value = 0;
    digits = 0;
  }
  if (withLimit) {
    // A script with leases ends each decision with the binding part's limit, a refusal then with
    // the wait its rate and block prove (read by provenWait), never past its retry.
    if (allowed) return fields === 3 && c >= 1 ? allow(c, a, b) : undefined;
    return fields === 5 && b >= 1 && d >= 1 && e <= b ? reject(d, a, b, c) : undefined;
  }
  if (allowed) return fields === 2 ? allow(limit, a, b) : undefined;
  // A refusal waits at least 1 ms; a retry time of 0 is not a refusal, whatever sent it.
  return fields === 3 && b >= 1 ? reject(limit, a, b, c) : undefined;
}

const SPACE = 32;
const ZERO = 48;
const NINE = 57;

/**
 * One entry of a script's reply (`A remaining resetAfterMs`, `R remaining retryAfterMs
 * resetAfterMs` or `E message`, as src/redis/lua writes them; with `withLimit`, a script with
 * leases, each decision then ends with its limit, and a refusal with its proven wait): its
 * decision, the error of its own key, or the error of an entry no script of ours writes.
 */
export function readDecision(entry: unknown, limit: number, withLimit = false): Decision | Error {
  return readEntry(entry, limit, withLimit) ?? unexpectedReply(entry, 'Redis');
}

/** A script with leases' refusal, once read by `readDecision`: the wait its rate and block prove, in ms (its last field). */
export function provenWait(entry: string): number {
  return Number(entry.slice(entry.lastIndexOf(' ') + 1));
}
