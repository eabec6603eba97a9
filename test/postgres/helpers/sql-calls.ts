import type { Decision, Rule } from '../../../src/index';
import { toQuery } from '../../../src/postgres/client';
import type { PostgresAlgorithm } from '../../../src/postgres/plans';
import { manyKeysParams, oneKeyParams, operationParams, type Operation, replyNumbers, rowKeyHeads, ruleNumbers, statements } from '../../../src/postgres/protocol';
import type { PostgresClientLike } from '../../../src/postgres';
import { toDecision } from '../../../src/store/reply';

/**
 * The SQL of one algorithm called directly through src/postgres/protocol.ts, each call under the
 * rule it names and at the clock reading it gives: what a limiter whose rule is a function of the
 * key sends.
 */
export function sqlCalls(client: PostgresClientLike, schema: string, algorithm: PostgresAlgorithm, prefix: string) {
  const query = toQuery(client);
  const sent = statements(schema, algorithm, 5_000);
  const heads = rowKeyHeads(prefix, algorithm);
  const decision = async (text: string, params: unknown[], rule: Rule): Promise<Decision> =>
    toDecision(
      replyNumbers(await query(text, params))!.map((number) => Number(number)),
      0,
      rule.limit,
    );
  const operate = (op: Operation, key: string, permits: number, now: number, rule: Rule, receipt: number | null = null) =>
    decision(sent.decide, operationParams(heads, op, { key, permits, now, rule: ruleNumbers(algorithm, rule) }, receipt), rule);
  return {
    acquire: (key: string, permits: number, now: number, rule: Rule) => decision(sent.oneKey, oneKeyParams(heads, { key, permits, now, rule: ruleNumbers(algorithm, rule) }), rule),
    /** A batch through the batch function: the decisions in the order given. */
    acquireBatch: async (calls: readonly { key: string; permits: number; now: number; rule: Rule }[]) => {
      const numbers = replyNumbers(await query(sent.manyKeys, manyKeysParams(heads, calls.map((call) => ({ ...call, rule: ruleNumbers(algorithm, call.rule) })))))!.map(Number);
      return calls.map((call, i) => toDecision(numbers, i, call.rule.limit));
    },
    peek: (key: string, permits: number, now: number, rule: Rule) => operate('peek', key, permits, now, rule),
    charge: (key: string, permits: number, now: number, rule: Rule) => operate('charge', key, permits, now, rule),
    block: (key: string, durationMs: number, now: number, rule: Rule) => operate('block', key, durationMs, now, rule),
    reserve: (key: string, permits: number, now: number, rule: Rule, receipt: number) => operate('reserve', key, permits, now, rule, receipt),
    refund: (key: string, permits: number, now: number, rule: Rule, receipt: number) => operate('refund', key, permits, now, rule, receipt),
    reset: async (key: string, rule: Rule) => void (await query(sent.decide, operationParams(heads, 'reset', { key, permits: 0, now: undefined, rule: ruleNumbers(algorithm, rule) }, null))),
  };
}
