import { allow, type Decision, reject } from '../../../src/core/decision';
import type { Concurrency, Rule } from '../../../src/index';
import { toQuery } from '../../../src/postgres/client';
import type { PostgresAlgorithm } from '../../../src/postgres/plans';
import { aloneRuleNumbers, concurrencyNumbers, type LeaseOperation, leaseParams, leaseStatement, replyNumbers, rowKeyHeads, ruleNumbers } from '../../../src/postgres/protocol';
import type { PostgresClientLike } from '../../../src/postgres';

/**
 * The lease function of one algorithm (or of an in-flight limit alone, `algorithm` undefined) called
 * directly through src/postgres/protocol.ts, at the clock reading each call gives: what a limiter
 * with `concurrency` sends.
 */
export function leaseCalls(client: PostgresClientLike, schema: string, algorithm: PostgresAlgorithm | undefined, prefix: string, concurrency: Concurrency, rule?: Rule) {
  const query = toQuery(client);
  const text = leaseStatement(schema, algorithm, 5_000);
  const heads = rowKeyHeads(prefix, algorithm ?? 'concurrency');
  const conc = concurrencyNumbers(concurrency);
  const ruleText = algorithm === undefined ? aloneRuleNumbers(concurrency) : ruleNumbers(algorithm, rule!);
  const numbers = async (op: LeaseOperation, key: string, permits: number, now: number | undefined, receipt: number | null): Promise<number[]> =>
    replyNumbers(await query(text, leaseParams(heads, op, { key, permits, now, rule: ruleText }, receipt, conc)))!.map(Number);
  const decision = async (op: LeaseOperation, key: string, permits: number, now: number, receipt: number | null = null): Promise<Decision> => {
    const [remaining, retryAfterMs, resetAfterMs, limit] = await numbers(op, key, permits, now, receipt);
    return retryAfterMs === 0 ? allow(limit!, remaining!, resetAfterMs!) : reject(limit!, remaining!, retryAfterMs!, resetAfterMs!);
  };
  return {
    reserve: (key: string, permits: number, now: number, receipt: number) => decision('reserve', key, permits, now, receipt),
    peek: (key: string, permits: number, now: number) => decision('peek', key, permits, now),
    /** A settle as the store layer sends it: a refund of what was not used, or a charge of what was over. */
    settle: (key: string, reserved: number, actual: number, now: number, receipt: number) =>
      actual > reserved ? decision('charge', key, actual - reserved, now, receipt) : decision('refund', key, reserved - actual, now, receipt),
    extend: async (key: string, ms: number, now: number, receipt: number) => (await numbers('extend', key, ms, now, receipt))[0] === 1,
    block: (key: string, durationMs: number, now: number) => decision('block', key, durationMs, now),
    reset: async (key: string) => void (await numbers('reset', key, 0, undefined, null)),
    /** The row as stored: its leases and expiry. */
    row: async (key: string) =>
      (await query(`SELECT leases::text AS leases, expires_at::text AS expires FROM "${schema}".ratekeeper_state WHERE key = $1`, [heads.head + key]))[0] as { leases: string | null; expires: string } | undefined,
  };
}
