// The fast path of src/postgres/sql/shell.ts (the one-key and batch functions `acquire` calls)
// against its general function, in SQL: the same calls on three copies of each key must give the
// same answers and leave the same stored state, to the digit, for every codec, on the whole rule
// domain (limits up to 2^53 - 1, windows up to 2^42 ms), with caller clocks in quarter
// milliseconds, running backwards and jumping far, and each call under one of two rules (a rule
// change carries the key's usage over; a batch whose calls differ in rule sends one per call).
// The store conformance suite compares both paths with the in-memory algorithms through the limiter.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { Rule } from '../../src/index';
import { codecs as codecOf, type PostgresAlgorithm } from '../../src/postgres/plans';
import { ruleNumbers } from '../../src/postgres/protocol';
import { decideFunction, manyKeysFunction, oneKeyFunction } from '../../src/postgres/sql/shell';
import { step as traceStep } from '../stores/conformance';
import { postgresPort } from '../stores/support/postgres-store';
import { migratedSchema } from './helpers/schema';

// Each codec, through the algorithm of the same name (the leaky bucket is the token bucket's codec).
const algorithms: PostgresAlgorithm[] = ['token-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter'];

// Windows of 20 s and more: rows expire on the server's clock, which moves a few ms per trace.
const smallRules = fc.record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) });
const wideRules = fc.record({
  limit: fc.oneof(fc.constantFrom(Number.MAX_SAFE_INTEGER, 2 ** 53 - 2, 2 ** 50, 999_999_999_989), fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER })),
  windowMs: fc.oneof(fc.constantFrom(Rule.MAX_WINDOW_MS, Rule.MAX_WINDOW_MS - 1, 86_400_000), fc.integer({ min: 20_000, max: Rule.MAX_WINDOW_MS })),
});
const rules = fc.oneof(smallRules, wideRules).map(({ limit, windowMs }) => new Rule(limit, windowMs));

// Each call of a trace, under which of the trace's two rules, and how many calls, from it on, go
// in one batch to the batch function (and to the general one). Between the acquires, now and then,
// another operation through the general function on every path's copy of the key alike: a charge
// (into debt, past the bound at times), a block, a reserve, a refund of that key's latest
// reservation, or the row expiring (its expiry moved to the past, as the server's clock would: the
// next acquire finds it reborn, block and receipts gone).
const step = fc
  .record({
    call: traceStep,
    second: fc.boolean(),
    batch: fc.integer({ min: 1, max: 4 }),
    op: fc.oneof(
      { weight: 4, arbitrary: fc.constant('acquire' as const) },
      ...(['charge', 'block', 'reserve', 'refund', 'expire'] as const).map((op) => ({ weight: 1, arbitrary: fc.constant(op) })),
    ),
    // A charge's size in hundredths of the limit: past the debt bound (two limits) at times.
    chargePercent: fc.integer({ min: 1, max: 300 }),
    blockMs: fc.oneof(fc.integer({ min: 0, max: 5_000 }), fc.integer({ min: 0, max: 500_000 }), fc.integer({ min: 0, max: 2 ** 42 })),
  })
  .map(({ call, second, batch, op, chargePercent, blockMs }) => ({ ...call, second, batch, op, chargePercent, blockMs }));
const traces = fc.record({ startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })), steps: fc.array(step, { minLength: 1, maxLength: 30 }) });

/** The three copies of each key: through the general function, the batch function, the one-key function. */
const paths = ['g:', 'm:', 'o:'] as const;

describe.skipIf(!postgresPort)('the fast path decides and stores exactly as the general function', () => {
  const made = migratedSchema('fast');

  // Numbers compared by value: 1.50 and 1.5 (the scale of a numeric) are the same number.
  const text = (sql: string) => `(SELECT array_agg(trim_scale(x) ORDER BY o) FROM unnest(${sql}) WITH ORDINALITY AS u(x, o))::text`;
  const literal = (values: readonly (string | number)[]) => `{${values.map((value) => `"${value}"`).join(',')}}`;
  const general = (algorithm: PostgresAlgorithm) => `"${made.schema}".${decideFunction(codecOf[algorithm])}($1, $2, $3, $4, $5, $6, $7, $8)`;

  // The trace below meets a reserve, the row expiring, an acquire and a refund on one key only now
  // and then; this is that sequence on every path.
  test.each(algorithms)('%s: an expired row reborn by an acquire holds no receipt, on every path (a refund of one issued before gives nothing)', async (algorithm) => {
    const rule = ruleNumbers(algorithm, new Rule(5, 60_000));
    const key = `${Math.random()}:reborn`;
    const codec = codecOf[algorithm];
    const acquire = {
      'g:': () => `"${made.schema}".${decideFunction(codec)}('g:', 'lg:', ARRAY[$1], '{1}', '{1000}', '${rule}', 'acquire')`,
      'm:': () => `"${made.schema}".${manyKeysFunction(codec)}('m:', 'lm:', ARRAY[$1], '{1}', '{1000}', '${rule}')`,
      'o:': () => `"${made.schema}".${oneKeyFunction(codec)}('o:', 'lo:', $1, 1, 1000, '${rule}')`,
    };
    const reborn = async (path: (typeof paths)[number]) => {
      const decide = async (op: string) => String((await made.pool.query(`SELECT ${text(general(algorithm))} AS r`, [path, `l${path}`, literal([key]), '{2}', '{1000}', rule, op, 77])).rows[0].r);
      await decide('reserve');
      await made.pool.query(`UPDATE "${made.schema}".ratekeeper_state SET expires_at = 0 WHERE key = $1`, [path + key]);
      const acquired = String((await made.pool.query(`SELECT ${text(acquire[path]())} AS r`, [key])).rows[0].r);
      const { receipts } = (await made.pool.query(`SELECT receipts::text FROM "${made.schema}".ratekeeper_state WHERE key = $1`, [path + key])).rows[0];
      return [acquired, await decide('refund'), receipts];
    };
    // One path at a time: a path's new row may reclaim the row another path has just expired.
    const answers = [];
    for (const path of paths) answers.push(await reborn(path));
    // Reborn: the acquire finds a new key (4 left), and the refund gives nothing back.
    expect(answers[0]![0]).toMatch(/^\{4,0,/);
    expect(answers[0]![1]).toMatch(/^\{4,/);
    expect(answers[0]![2]).toBe(null);
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]).toEqual(answers[0]);
  });

  for (const algorithm of algorithms) {
    const codec = codecOf[algorithm];
    test.prop([rules, rules, traces], { numRuns: 60 })(
      `${algorithm}: one key at a time, in batches, and through the general function alike, blocked, in debt, reserved, under a changing rule`,
      async (first, second, { startMs, steps }) => {
        const prefix = `${Math.random()}:`;
        type Call = { key: string; permits: number; now: number; batch: number; op: (typeof steps)[number]['op']; amount: number; rule: string };
        const calls: Call[] = [];
        let now = startMs;
        for (const { moveMs, key, share, second: other, batch, op, chargePercent, blockMs } of steps) {
          now += moveMs;
          const rule = other ? second : first;
          const permits = 1 + Math.floor(share * (rule.limit - 1));
          const charged = Math.min(Number.MAX_SAFE_INTEGER, Math.max(1, Math.floor((rule.limit * chargePercent) / 100)));
          const amount = op === 'block' ? blockMs : op === 'charge' ? charged : permits;
          calls.push({ key: prefix + key, permits, now, batch, op, amount, rule: ruleNumbers(algorithm, rule) });
        }
        const decide = (path: string, call: Call, receipt: number | null) =>
          made.pool.query(`SELECT ${text(general(algorithm))} AS r`, [path, `l${path}`, literal([call.key]), literal([call.amount]), literal([call.now]), call.rule, call.op, receipt]);
        // Each key's latest reservation, the same id on every path.
        const receipts = new Map<string, number>();
        const fromGeneral: string[] = [];
        const many: string[] = [];
        const one: string[] = [];
        for (let i = 0; i < calls.length; ) {
          const call = calls[i]!;
          if (call.op === 'expire') {
            await made.pool.query(`UPDATE "${made.schema}".ratekeeper_state SET expires_at = 0 WHERE key = ANY ($1)`, [paths.map((path) => path + call.key)]);
            i++;
            continue;
          }
          if (call.op !== 'acquire') {
            if (call.op === 'reserve') receipts.set(call.key, i + 1);
            const answers = new Set<string>();
            for (const path of paths) answers.add(String((await decide(path, call, receipts.get(call.key) ?? null)).rows[0].r));
            expect(answers.size, `${call.op} ${call.key}`).toBe(1);
            i++;
            continue;
          }
          let end = i + 1;
          while (end < Math.min(calls.length, i + call.batch) && calls[end]!.op === 'acquire') end++;
          const batch = calls.slice(i, end);
          i = end;
          const rulesOf = batch.every((c) => c.rule === call.rule) ? call.rule : `{${batch.map((c) => c.rule.slice(1, -1)).join(',')}}`;
          const values = [literal(batch.map((c) => c.key)), literal(batch.map((c) => c.permits)), literal(batch.map((c) => c.now)), rulesOf];
          // One after the other: a path's reclaim may delete another path's expired rows, and the
          // batch function leaves a row another transaction holds undecided (-1, sent again alone
          // by the limiter) where the general function would wait for it.
          const decided = String((await made.pool.query(`SELECT ${text(general(algorithm))} AS r`, ['g:', 'lg:', ...values, 'acquire', null])).rows[0].r);
          const fast = String((await made.pool.query(`SELECT ${text(`"${made.schema}".${manyKeysFunction(codec)}($1, $2, $3, $4, $5, $6)`)} AS r`, ['m:', 'lm:', ...values])).rows[0].r);
          fromGeneral.push(decided.slice(1, -1));
          many.push(fast.slice(1, -1));
          for (const c of batch) {
            const query = `SELECT ${text(`"${made.schema}".${oneKeyFunction(codec)}($1, $2, $3, $4, $5, $6)`)} AS r`;
            one.push(String((await made.pool.query(query, ['o:', 'lo:', c.key, c.permits, c.now, c.rule])).rows[0].r).slice(1, -1));
          }
        }
        expect(many).toEqual(fromGeneral);
        expect(one.join(',')).toEqual(fromGeneral.join(','));
        // The expiries are not compared: each path reads the server's clock at its own moment.
        // Blocks are the caller's clock's.
        const stored = async (path: string) =>
          (
            await made.pool.query(
              `SELECT substr(key, 3) AS key, ${text('state')} AS state, blocked_until, rule_limit, rule_window_ms, ${text('receipts')} AS receipts
               FROM "${made.schema}".ratekeeper_state WHERE starts_with(key, $1) ORDER BY 1`,
              [`${path}${prefix}`],
            )
          ).rows;
        const states = await stored('g:');
        expect(await stored('m:')).toEqual(states);
        expect(await stored('o:')).toEqual(states);
      },
    );
  }
});
