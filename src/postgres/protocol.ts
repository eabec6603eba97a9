import type { Rule } from '../core/rule';
import { expirySlackMs } from '../store/constants';
import { namedRule } from '../store/reply';
import { ruleFreeNamespace } from '../store/keys';
import { quotedSchema } from './migrate';
import { codecs, type PostgresAlgorithm } from './plans';
import { leaseFunction } from './sql/leases';
import { decideFunction, manyKeysFunction, oneKeyFunction } from './sql/shell';

// What PostgresRateLimiter sends and reads, as pure functions: the statements, their parameters
// and the reply's numbers. The SQL they call is ./sql/shell.ts.

/** The three statements of a limiter: the general function, and the one-key and batch fast paths. */
export interface Statements {
  readonly decide: string;
  readonly oneKey: string;
  readonly manyKeys: string;
}

/**
 * The statements for `algorithm` in `schema`. Each bounds its lock waits by `timeoutMs` (its
 * `lock_timeout`, for its own transaction, which PgBouncer in transaction mode allows; set by the
 * function scanned in FROM, whose row is made before the select list runs, planned more cheaply than
 * a subquery: bench/HISTORY.md), and answers its numbers as one text, split by
 * {@link replyNumbers}: a client parses an array only when it knows its type (postgres.js with
 * `fetch_types: false`, as behind PgBouncer, hands over `{1,0,3}`), and pg parses numeric[] into
 * floats.
 */
export function statements(schema: string | undefined, algorithm: PostgresAlgorithm, timeoutMs: number): Statements {
  const codec = codecs[algorithm];
  const reply = replyOf(schema, timeoutMs);
  return {
    decide: reply(`${decideFunction(codec)}($1::text, $2::text, $3::text[], $4::numeric[], $5::numeric[], $6::numeric[], $7::text, $8::numeric)`),
    oneKey: reply(`${oneKeyFunction(codec)}($1::text, $2::text, $3::text, $4::numeric, $5::numeric, $6::numeric[])`),
    manyKeys: reply(`${manyKeysFunction(codec)}($1::text, $2::text, $3::text[], $4::numeric[], $5::numeric[], $6::numeric[])`),
  };
}

/** Wraps a function call into a statement answering its numbers as one text, its lock waits bounded by `timeoutMs` (see {@link statements}). */
function replyOf(schema: string | undefined, timeoutMs: number): (call: string) => string {
  const bound = timeoutMs === Infinity ? '' : ` FROM set_config('lock_timeout', '${timeoutMs}', true) AS bound`;
  return (call) => `SELECT array_to_string(${quotedSchema(schema)}.${call}, ',', 'NULL') AS r${bound}`;
}

/**
 * The statement of a limiter with `concurrency`, for every operation: the lease function of
 * `algorithm`, or of an in-flight limit alone (./sql/leases.ts). It answers five numbers
 * (remaining, retryAfterMs, resetAfterMs, the binding part's limit, the wait the rate and a block
 * prove), an extension one (1: held).
 */
export function leaseStatement(schema: string | undefined, algorithm: PostgresAlgorithm | undefined, timeoutMs: number): string {
  const codec = algorithm === undefined ? undefined : codecs[algorithm];
  return replyOf(schema, timeoutMs)(`${leaseFunction(codec)}($1::text, $2::text, $3::text, $4::numeric, $5::numeric, $6::numeric[], $7::text, $8::numeric, $9::numeric[])`);
}

/** An in-flight limit as the lease functions read it: {limit, leaseMs}. */
export function concurrencyNumbers({ limit, leaseMs }: { readonly limit: number; readonly leaseMs: number }): string {
  return `{${limit},${leaseMs}}`;
}

/** The rule an in-flight limit alone sends: {limit, leaseMs} (kept in the row where a rate keeps its rule), then the expiry slack. */
export function aloneRuleNumbers({ limit, leaseMs }: { readonly limit: number; readonly leaseMs: number }): string {
  return `{${limit},${leaseMs},${expirySlackMs(leaseMs)}}`;
}

/** The operations of {@link leaseStatement}: every key operation, and a lease's extension. */
export type LeaseOperation = Operation | 'extend';

/**
 * The parameters of {@link leaseStatement} for one operation on one key: `call.permits` is a block's
 * duration for 'block', an extension's ms for 'extend'; `receipt` names the lease ('reserve',
 * 'refund', 'charge', 'extend'); `concurrency` is {@link concurrencyNumbers}.
 */
export function leaseParams({ head, legacy }: RowKeyHeads, op: LeaseOperation, call: SentCall, receipt: number | null, concurrency: string): unknown[] {
  return [head, legacy, call.key, call.permits, call.now ?? null, call.rule, op, receipt, concurrency];
}

/**
 * What starts a key's row key: `prefix + (name + ':')? + algorithm + ':'` (the key follows); and
 * what started it in the previous version, `prefix + algorithm + ':'` (PostgreSQL had no `name`),
 * which the rule and the key followed (`limit + '/' + windowMs + ':' + key`, written by the SQL): a
 * key's first call reads that row and adopts it. An in-flight limit alone is `'concurrency'` (no previous version wrote one).
 */
export function rowKeyHeads(prefix: string, algorithm: PostgresAlgorithm | 'concurrency', name?: string): { readonly head: string; readonly legacy: string } {
  return { head: ruleFreeNamespace(prefix, name, algorithm), legacy: ruleFreeNamespace(prefix, undefined, algorithm) };
}

/** A rule as the SQL reads it, an array literal: its codec's numbers, then the expiry slack. */
export function ruleNumbers(algorithm: PostgresAlgorithm, rule: Rule): string {
  return `{${[...codecs[algorithm].ruleArgs(rule), expirySlackMs(rule.windowMs)].join(',')}}`;
}

/** A call as the statements take it. */
export interface SentCall {
  readonly key: string;
  readonly permits: number;
  /** The caller's clock reading, or undefined when the server's clock decides. */
  readonly now: number | undefined;
  /** {@link ruleNumbers} of the call's rule. */
  readonly rule: string;
}

/** What starts a limiter's row keys, now and in the previous version (see {@link rowKeyHeads}). */
export type RowKeyHeads = ReturnType<typeof rowKeyHeads>;

/** The parameters of {@link Statements.oneKey}. */
export function oneKeyParams({ head, legacy }: RowKeyHeads, call: SentCall): unknown[] {
  return [head, legacy, call.key, call.permits, call.now ?? null, call.rule];
}

/**
 * The parameters of {@link Statements.manyKeys}: the calls' rule once when they share it (the
 * usual batch), else each call's in turn. The clock readings are all the caller's or none.
 */
export function manyKeysParams({ head, legacy }: RowKeyHeads, calls: readonly SentCall[]): unknown[] {
  const [first] = calls;
  const shared = calls.every((call) => call.rule === first!.rule);
  const rules = shared ? first!.rule : `{${calls.map((call) => call.rule.slice(1, -1)).join(',')}}`;
  const nows = first!.now === undefined ? null : `{${calls.map((call) => call.now).join(',')}}`;
  return [head, legacy, textArray(calls), `{${calls.map((call) => call.permits).join(',')}}`, nows, rules];
}

/** The operations of {@link Statements.decide} besides a decision. */
export type Operation = 'peek' | 'charge' | 'reserve' | 'refund' | 'block' | 'reset';

/**
 * The parameters of {@link Statements.decide} for one operation on one key: `call.permits` is a
 * block's duration for 'block'; `receipt` the reservation's id for 'reserve' and 'refund'.
 */
export function operationParams({ head, legacy }: RowKeyHeads, op: Operation, call: SentCall, receipt: number | null): unknown[] {
  return [head, legacy, textArray([call]), `{${call.permits}}`, call.now === undefined ? null : `{${call.now}}`, call.rule, op, receipt];
}

/**
 * A new reservation's id: a random whole number from 1 to 2^52, drawn here so that every engine
 * keeps receipts alike. The key keeps its outstanding ids (at most `MAX_RECEIPTS`); a refund names
 * one, and gives nothing when the key no longer holds it.
 */
export function receiptId(): number {
  return Math.floor(Math.random() * 2 ** 52) + 1;
}

/**
 * The rule a refund's reply names after its decision (limit, windowMs): the key's own, when it is
 * counted under another rule than the call's (a refund never changes a key's rule).
 * @throws a reply error when they are no rule.
 */
export function ownRule(numbers: readonly string[]): Rule {
  const [limit, windowMs] = numbers.map(Number);
  return namedRule(limit!, windowMs!, numbers, 'PostgreSQL');
}

/** The reply's numbers as the statements answer them (one text, split on commas), or undefined when it is not one of ours. */
export function replyNumbers(rows: readonly unknown[]): string[] | undefined {
  const text = (rows[0] as { r?: unknown } | undefined)?.r;
  // A NULL among the numbers reads NaN, which the reply check refuses; a reset answers none.
  return typeof text !== 'string' ? undefined : text === '' ? [] : text.split(',');
}

/** The calls' keys as a PostgreSQL array literal: each quoted, with `"` and `\` escaped. */
function textArray(calls: readonly { readonly key: string }[]): string {
  return `{${calls.map((call) => `"${call.key.replace(/["\\]/g, '\\$&')}"`).join(',')}}`;
}
