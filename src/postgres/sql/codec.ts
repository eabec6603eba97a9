// An algorithm in PL/pgSQL is a codec: pure operations on its stored state, `numeric[]` (null: a
// key never seen), each a fragment of PL/pgSQL that reads its inputs and sets its outputs, with no
// storage, no blocks, no receipts list and no mode flag in it (./shell.ts does all of that, once).
// `numeric` is exact for every rule of the domain (limit × windowMs passes bigint's range), so each
// codec decides exactly as its in-memory twin (src/algorithms) given the same clock readings.
//
// Inputs: `s` the state, `now` the clock reading, `prm` the permits, `rule` the rule's numbers
// (`ruleArgs`: limit and windowMs first, the codec's own after, the expiry slack last). No fragment
// assigns an input: the shell inlines `decide` into its fast path, where they are its variables.

import { MAX_SAFE, usageBound } from '../../store/constants';
import type { Rule } from '../../core/rule';
import { QUOTE } from './dollar-quote';

/** One operation: its PL/pgSQL declarations and statements. */
export interface Fragment {
  readonly declare: string;
  readonly body: string;
}

export interface Codec {
  /** The SQL name of the codec's functions: `ratekeeper_<name>_decide` and so on. */
  readonly name: 'token_bucket' | 'fixed_window' | 'sliding_window_log' | 'sliding_window_counter';
  /** The rule's numbers the codec reads: limit, windowMs, then its own (the shell appends the expiry slack). */
  readonly ruleArgs: (rule: Rule) => number[];
  /** The same numbers in SQL, from a stored limit and window (SQL expressions): how a carry-over reads the old rule. */
  readonly ruleOf: (limit: string, windowMs: string) => string;
  /** Sets `answer` (remaining, retryAfterMs with 0 for a grant, resetAfterMs) and `next`, the state after a grant (null: refused). `prm` may be 0. */
  readonly decide: Fragment;
  /** Sets `next`, the state after counting `prm` already used (never refused; debt up to the bound), and `forgave`, whether the bound dropped part of it. */
  readonly charge: Fragment;
  /** Sets `next`, the state after giving back up to `prm` permits of the grant whose receipt holds `mark` (null: nothing given). */
  readonly refund: Fragment;
  /** Sets `used`: the whole permits the state counts as used at `now`, debt included (what a rule change carries over). */
  readonly used: Fragment;
  /** What a receipt records of the grant that left state `next` at `now` (a parenthesized SQL expression): its window, its time, or a bucket's deficit. */
  readonly mark: string;
  /**
   * Buckets only: the deficit of state `s` at `now` in units (capacity less the units held, 0
   * for a full bucket, beyond the capacity in debt), an SQL expression. Its presence makes the
   * shell keep the receipts' suffix minima (D4 of issue 24): a bucket's refund is bounded by the
   * lowest deficit since its grant.
   */
  readonly deficit?: string;
}

/** floorDiv of src/core/exact.ts: `div` truncates, one compare corrects it. An SQL function call would cost more. */
export const floorDiv = (n: string, d: string): string => `(CASE WHEN div(${n}, ${d}) * ${d} > ${n} THEN div(${n}, ${d}) - 1 ELSE div(${n}, ${d}) END)`;

/** ceilDiv of src/core/exact.ts. */
export const ceilDiv = (n: string, d: string): string => `(CASE WHEN div(${n}, ${d}) * ${d} < ${n} THEN div(${n}, ${d}) + 1 ELSE div(${n}, ${d}) END)`;

/** `usageBound(limit)` in SQL: what a key may count as used, `(1 + DEBT_LIMITS) × limit`, never past 2^53 − 1. */
export const bound = (limit: string): string => `least(${usageBound(1)} * ${limit}, ${MAX_SAFE})`;

const functionOf = (schema: string, name: string, op: string, args: string, fragment: Fragment): string => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_${name}_${op}(${args})
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS ${QUOTE}
DECLARE
  ${fragment.declare}
BEGIN
  ${fragment.body}
END ${QUOTE};
`;

const STATE = 's numeric[], now numeric';

/** The codec's operations as PL/pgSQL functions, for the shell's general path: `ratekeeper_<name>_decide(s, now, prm, rule)` and so on. */
export const codecFunctions = (schema: string, codec: Codec): string =>
  [
    functionOf(schema, codec.name, 'decide', `${STATE}, prm numeric, rule numeric[], OUT next numeric[], OUT answer numeric[]`, codec.decide),
    functionOf(schema, codec.name, 'charge', `${STATE}, prm numeric, rule numeric[], OUT next numeric[], OUT forgave boolean`, codec.charge),
    functionOf(schema, codec.name, 'refund', `${STATE}, prm numeric, rule numeric[], mark numeric, OUT next numeric[]`, codec.refund),
    functionOf(schema, codec.name, 'used', `${STATE}, rule numeric[], OUT used numeric`, codec.used),
  ].join('');
