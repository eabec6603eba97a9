// The fast path of src/postgres/sql/one-key.ts (the one-key and many-keys functions `acquire`
// calls) against the general path, `ratekeeper_decide` of src/postgres/sql/schema.ts, in SQL: the
// same calls on three copies of each key must give the same answers and leave the same stored
// state, to the digit, for every codec, on the whole rule domain (limits up to 2^53 - 1, windows
// up to 2^42 ms), with caller clocks in quarter milliseconds, running backwards and jumping far.
// The store conformance suite compares both paths with the in-memory algorithms through the limiter.
import { fc, test } from '@fast-check/vitest';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { Rule } from '../../src/index';
import { expirySlackMs, type SqlPlan, sqlPlans } from '../../src/postgres/plans';
import { migrate } from '../../src/postgres';
import { manyKeysFunction, oneKeyFunction } from '../../src/postgres/sql/one-key';
import { step as traceStep } from '../stores/conformance';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

// Each codec, through the algorithm of the same name (the leaky bucket is the token bucket's codec).
const codecs: SqlPlan['codec'][] = ['token-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter'];

// Windows of 20 s and more: rows expire on the server's clock, which moves a few ms per trace.
const smallRules = fc.record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) });
const wideRules = fc.record({
  limit: fc.oneof(fc.constantFrom(Number.MAX_SAFE_INTEGER, 2 ** 53 - 2, 2 ** 50, 999_999_999_989), fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER })),
  windowMs: fc.oneof(fc.constantFrom(Rule.MAX_WINDOW_MS, Rule.MAX_WINDOW_MS - 1, 86_400_000), fc.integer({ min: 20_000, max: Rule.MAX_WINDOW_MS })),
});
const rules = fc.oneof(smallRules, wideRules).map(({ limit, windowMs }) => new Rule(limit, windowMs));

// Each call of a trace, and how many calls, from it on, go in one batch to the many-keys function
// (and to ratekeeper_decide).
const step = fc.record({ call: traceStep, batch: fc.integer({ min: 1, max: 4 }) }).map(({ call, batch }) => ({ ...call, batch }));
const traces = fc.record({ startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })), steps: fc.array(step, { minLength: 1, maxLength: 30 }) });

describe.skipIf(!postgresPort)('the fast path decides and stores exactly as ratekeeper_decide', () => {
  let pool: pg.Pool;
  const schema = uniqueSchema('fast');
  beforeAll(async () => {
    pool = new pg.Pool({ ...connection(), max: 2 });
    await migrate(pool, { schema });
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  // Numbers compared by value: 1.50 and 1.5 (the scale of a numeric) are the same number.
  const text = (sql: string) => `(SELECT array_agg(trim_scale(x) ORDER BY o) FROM unnest(${sql}) WITH ORDINALITY AS u(x, o))::text`;
  const literal = (values: readonly (string | number)[]) => `{${values.map((value) => `"${value}"`).join(',')}}`;

  for (const codec of codecs) {
    test.prop([rules, traces], { numRuns: 40 })(`${codec}: one key at a time, in batches, and through ratekeeper_decide alike`, async (rule, { startMs, steps }) => {
      const ruleArgs = literal([...sqlPlans[codec].ruleArgs(rule), expirySlackMs(rule)]);
      const prefix = `${Math.random()}:`;
      const calls: { key: string; permits: number; now: number; batch: number }[] = [];
      let now = startMs;
      for (const { moveMs, key, share, batch } of steps) {
        now += moveMs;
        calls.push({ key: prefix + key, permits: 1 + Math.floor(share * (rule.limit - 1)), now, batch });
      }
      const general: string[] = [];
      const many: string[] = [];
      for (let i = 0; i < calls.length; ) {
        const batch = calls.slice(i, i + calls[i]!.batch);
        i += batch.length;
        const values = (path: string) => [literal(batch.map((call) => path + call.key)), literal(batch.map((call) => call.permits)), literal(batch.map((call) => call.now))];
        const [decided, fast] = await Promise.all([
          pool.query(`SELECT ${text(`"${schema}".ratekeeper_decide($1, $2, $3, $4, $5, 'acquire')`)} AS r`, [codec, ruleArgs, ...values('g:')]),
          pool.query(`SELECT ${text(`"${schema}".${manyKeysFunction(codec)}($1, $2, $3, $4)`)} AS r`, [...values('m:'), ruleArgs]),
        ]).then((results) => results.map((result) => String(result.rows[0].r)));
        general.push(decided!);
        many.push(fast!);
      }
      const one: string[] = [];
      for (const call of calls) {
        one.push(String((await pool.query(`SELECT ${text(`"${schema}".${oneKeyFunction(codec)}($1, $2, $3, $4)`)} AS r`, [`o:${call.key}`, call.permits, call.now, ruleArgs])).rows[0].r));
      }
      expect(many).toEqual(general);
      expect(`{${one.map((answer) => answer.slice(1, -1)).join(',')}}`).toEqual(`{${general.map((answer) => answer.slice(1, -1)).join(',')}}`);
      // The expiries are not compared: each path reads the server's clock at its own moment.
      const stored = async (path: string) =>
        (await pool.query(`SELECT substr(key, 3) AS key, ${text('state')} AS state FROM "${schema}".ratekeeper_state WHERE starts_with(key, $1) ORDER BY 1`, [`${path}${prefix}`])).rows;
      const states = await stored('g:');
      expect(await stored('m:')).toEqual(states);
      expect(await stored('o:')).toEqual(states);
    });
  }
});
