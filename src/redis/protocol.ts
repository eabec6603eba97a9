import type { Decision } from '../core/decision';
import type { Rule } from '../core/rule';
import { namedRule, unexpectedReply } from '../store/reply';
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

/**
 * What a script does to one key besides deciding in a batch; `decide` is a decision sent alone (a
 * cluster's second try, see {@link GIVEN_SPLIT}).
 */
export type KeyOperation = 'decide' | 'peek' | 'reserve' | 'charge' | 'refund' | 'block' | 'reset' | 'extend';

/**
 * The split of a call on a cluster: the previous version's key is in another slot, so a call that
 * finds its key absent answers {@link ABSENT} instead of deciding, and the engine reads that key.
 */
export const CLUSTER_SPLIT = -1;

/**
 * The split of a cluster's second try of a call that answered {@link ABSENT}: its arguments start
 * with what the engine read of the previous key (its value and its PTTL, -2 for no key), adopted
 * only if the key is still absent.
 */
export const GIVEN_SPLIT = -2;

/** A script's answer for a key absent on a cluster (see {@link CLUSTER_SPLIT}). */
export const ABSENT = 'N';

/**
 * An operation's KEYS and ARGV: its name, the caller's reading ('' for the server's clock; any for a
 * reset), `split`, the rule, then its own arguments: permits for decide, peek and charge, permits
 * and the receipt id for reserve and refund, the duration for block, none for reset (after what
 * the engine read, on a cluster's second try).
 */
export function operationArguments(redisKey: string, operation: KeyOperation, reading: string, split: number, rule: Rule, rest: readonly string[]): ScriptArguments {
  return { keys: [redisKey], args: [operation, reading, String(split), String(rule.limit), String(rule.windowMs), ...rest] };
}

/**
 * How many bytes of a key the previous version's layout put the rule after (the client's own key
 * prefix, the limiter's prefix, name and algorithm), so that the scripts can find what it wrote
 * (DESIGN-24 D3). Not on a cluster, where the two keys are in different slots (see {@link CLUSTER_SPLIT}).
 */
export function legacySplit(keyPrefix: string): number {
  return new TextEncoder().encode(keyPrefix).length;
}

/** A reservation's receipt id: a random whole number in [1, 2^52], drawn by the caller (DESIGN-24 D4). */
export function receiptId(): string {
  return String(1 + Math.floor(Math.random() * 2 ** 52));
}

/**
 * A batch's reply: one decision per call, each with its own rule's limit, the error of that key, or
 * {@link ABSENT} (on a cluster). A reply of any other shape (a wrongly wired adapter, a foreign
 * script) throws, and is a store error for every call of the batch.
 */
export function batchDecisions(reply: unknown, calls: readonly BatchCall[]): (Decision | Error | typeof ABSENT)[] {
  if (!Array.isArray(reply) || reply.length !== calls.length) throw unexpectedReply(reply, 'Redis');
  const results: (Decision | Error | typeof ABSENT)[] = [];
  for (let i = 0; i < calls.length; i++) {
    const entry: unknown = reply[i];
    if (entry === ABSENT) {
      results.push(ABSENT);
      continue;
    }
    const result = readDecision(entry, calls[i]!.rule.limit);
    if (result instanceof Error && !(typeof entry === 'string' && entry.startsWith('E '))) throw result;
    results.push(result);
  }
  return results;
}

/**
 * A refund's reply: the key's own rule, when the key is counted under another rule than the
 * call's (the script names it first, `S<limit>/<windowMs> `: a refund never changes a key's rule),
 * and the reply past it.
 */
export function ownRule(reply: unknown): { rule: Rule | undefined; rest: unknown } {
  if (typeof reply !== 'string' || !reply.startsWith('S')) return { rule: undefined, rest: reply };
  const named = /^S(\d+)\/(\d+) /.exec(reply);
  if (named === null) throw unexpectedReply(reply, 'Redis');
  return { rule: namedRule(Number(named[1]), Number(named[2]), reply, 'Redis'), rest: reply.slice(named[0].length) };
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

/**
 * What the previous version wrote under a key, as `PREVIOUS_KEY` (src/redis/scripts.ts) read it on a
 * cluster, for a second try ({@link GIVEN_SPLIT}): its value and its PTTL (-2 for no key).
 */
export function previousKeyArguments(reply: unknown): [string, string] {
  if (Array.isArray(reply) && reply.length === 2 && typeof reply[0] === 'string' && (typeof reply[1] === 'number' || typeof reply[1] === 'bigint')) return [reply[0], String(reply[1])];
  throw unexpectedReply(reply, 'Redis');
}

/**
 * The previous version's Redis key of a caller's key: the rule between the limiter's namespace and
 * the key, as src/store/keys.ts's storeNamespace and the scripts' legacy_key name it.
 */
export function previousRedisKey(namespace: string, rule: Rule, key: string): string {
  return `${namespace}${rule.limit}/${rule.windowMs}:${key}`;
}
