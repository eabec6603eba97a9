import type { Decision } from '../core/decision';
import type { Rule } from '../core/rule';
import { unexpectedReply } from '../store/reply';
import { readDecision } from './reply';

// What the scripts take and give back (their dispatch is described in src/redis/lua/shell.ts), as
// pure functions: the senders only add timing, ordering and the client.

/** One decision of a batch, as its script needs it (a store layer's call is one as it is). */
export interface BatchCall {
  /** The caller's key: the Redis key is the limiter's namespace and it. */
  readonly key: string;
  /** Permits. */
  readonly amount: number;
  /** The caller's clock reading; read only when the caller's clock decides. */
  readonly now: number | undefined;
  readonly rule: Rule;
}

/** What one script run is sent: its KEYS and its ARGV. */
export interface ScriptArguments {
  readonly keys: string[];
  readonly args: string[];
}

/**
 * A batch's KEYS (`namespace` and each call's key) and ARGV: for calls that share one rule (the
 * usual case) `split` and the rule's limit and windowMs, one argument more than when the rule was
 * the limiter's; for calls under several, minus their number, `split`, each rule's limit and
 * windowMs, and each key's rule index. Then the permits (left out when all are 1 and the server's
 * clock decides: a third fewer arguments to send and parse), then the caller's readings when its
 * clock decides.
 */
export function batchArguments(calls: readonly BatchCall[], namespace: string, split: number, callerClock: boolean): ScriptArguments {
  const keys: string[] = [];
  const first = calls[0]!.rule;
  let shared = true;
  let leaveOut = !callerClock;
  for (const call of calls) {
    keys.push(namespace + call.key);
    if (call.amount !== 1) leaveOut = false;
    if (call.rule !== first && (call.rule.limit !== first.limit || call.rule.windowMs !== first.windowMs)) shared = false;
  }
  const args = shared ? [String(split), String(first.limit), String(first.windowMs)] : perCallRules(calls, split);
  if (!leaveOut) for (const call of calls) args.push(String(call.amount));
  if (callerClock) for (const call of calls) args.push(String(call.now));
  return { keys, args };
}

function perCallRules(calls: readonly BatchCall[], split: number): string[] {
  const index = new Map<string, number>();
  const rules: string[] = [];
  const chosen: string[] = [];
  for (const { rule } of calls) {
    const id = `${rule.limit}/${rule.windowMs}`;
    let n = index.get(id);
    if (n === undefined) {
      n = index.size + 1;
      index.set(id, n);
      rules.push(String(rule.limit), String(rule.windowMs));
    }
    chosen.push(String(n));
  }
  return [String(-index.size), String(split), ...rules, ...chosen];
}

/** What a script does to one key besides deciding. */
export type KeyOperation = 'peek' | 'reserve' | 'charge' | 'refund' | 'block' | 'reset' | 'extend';

/**
 * An operation's KEYS and ARGV: its name, the caller's reading ('' for the server's clock; any for a
 * reset), `split`, the rule, then its own arguments: permits for peek and charge, permits and the
 * receipt id for reserve and refund, the duration for block, none for reset.
 */
export function operationArguments(redisKey: string, operation: KeyOperation, reading: string, split: number, rule: Rule, rest: readonly string[]): ScriptArguments {
  return { keys: [redisKey], args: [operation, reading, String(split), String(rule.limit), String(rule.windowMs), ...rest] };
}

/**
 * How many bytes of a key the previous version's layout put the rule after (the client's own key
 * prefix, the limiter's prefix, name and algorithm), so that the scripts can find what it wrote
 * (DESIGN-24 D3); 0 where they must not look (a cluster, where the two keys are in different slots).
 */
export function legacySplit(keyPrefix: string): number {
  return new TextEncoder().encode(keyPrefix).length;
}

/** A reservation's receipt id: a random whole number in [1, 2^52], drawn by the caller (DESIGN-24 D4). */
export function receiptId(): string {
  return String(1 + Math.floor(Math.random() * 2 ** 52));
}

/**
 * A batch's reply: one decision per call, each with its own rule's limit, or the error of that key.
 * A reply of any other shape (a wrongly wired adapter, a foreign script) throws, and is a store
 * error for every call of the batch.
 */
export function batchDecisions(reply: unknown, calls: readonly BatchCall[]): (Decision | Error)[] {
  if (!Array.isArray(reply) || reply.length !== calls.length) throw unexpectedReply(reply, 'Redis');
  const results: (Decision | Error)[] = [];
  for (let i = 0; i < calls.length; i++) {
    const entry: unknown = reply[i];
    const result = readDecision(entry, calls[i]!.rule.limit);
    if (result instanceof Error && !(typeof entry === 'string' && entry.startsWith('E '))) throw result;
    results.push(result);
  }
  return results;
}

/** An operation's decision, or (thrown) the error of its key or of a reply no script of ours sends. */
export function operationDecision(reply: unknown, limit: number, withLimit = false): Decision {
  const result = readDecision(reply, limit, withLimit);
  if (result instanceof Error) throw result;
  return result;
}

/** Checks the reply of an operation that answers nothing ('OK'), or for an extension whether the lease was held ('OK' or 'NO'). */
export function operationDone(reply: unknown, limit: number): boolean {
  if (reply === 'OK') return true;
  if (reply === 'NO') return false;
  throw typeof reply === 'string' && reply.startsWith('E ') ? (readDecision(reply, limit) as Error) : unexpectedReply(reply, 'Redis');
}
