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
// (and to ratekeeper_decide). Between the acquires, now and then, another operation through
// ratekeeper_decide on every path's copy of the key alike: a charge (into debt, past the bound at
// times), a block, a reserve, a refund of that copy's latest receipt, or the row expiring (its
// expiry moved to the past, as the server's clock would: the next acquire finds it reborn, block
// gone, in a new era that voids the receipts issued before).
const step = fc
  .record({
    call: traceStep,
    batch: fc.integer({ min: 1, max: 4 }),
    op: fc.oneof(
      { weight: 4, arbitrary: fc.constant('acquire' as const) },
      ...(['charge', 'block', 'reserve', 'refund', 'expire'] as const).map((op) => ({ weight: 1, arbitrary: fc.constant(op) })),
    ),
    // A charge's size in hundredths of the limit: past the debt bound (two limits) at times.
    chargePercent: fc.integer({ min: 1, max: 300 }),
    blockMs: fc.oneof(fc.integer({ min: 0, max: 5_000 }), fc.integer({ min: 0, max: 500_000 }), fc.integer({ min: 0, max: 2 ** 42 })),
  })
  .map(({ call, batch, op, chargePercent, blockMs }) => ({ ...call, batch, op, chargePercent, blockMs }));
const traces = fc.record({ startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })), steps: fc.array(step, { minLength: 1, maxLength: 30 }) });

/** The three copies of each key: through ratekeeper_decide, the many-keys function, the one-key function. */
const paths = ['g:', 'm:', 'o:'] as const;

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

  // The trace above meets a reserve, the row expiring, an acquire and a refund on one key only now
  // and then; this is that sequence on every path.
  test.each(codecs)('%s: an expired row reborn by an acquire is in a new era with nothing credited, on every path (the receipts issued before refund nothing)', async (codec) => {
    const rule = new Rule(5, 60_000);
    const ruleArgs = literal([...sqlPlans[codec].ruleArgs(rule), expirySlackMs(rule)]);
    const key = `${Math.random()}:reborn`;
    const answers = await Promise.all(
      (
        [
          ['g:', (k: string) => `"${schema}".ratekeeper_decide('${codec}', '${ruleArgs}', ARRAY[${k}], '{1}', '{1000}', 'acquire')`],
          ['m:', (k: string) => `"${schema}".${manyKeysFunction(codec)}(ARRAY[${k}], '{1}', '{1000}', '${ruleArgs}')`],
          ['o:', (k: string) => `"${schema}".${oneKeyFunction(codec)}(${k}, 1, 1000, '${ruleArgs}')`],
        ] as const
      ).map(async ([path, acquire]) => {
        const client = await pool.connect();
        try {
          const decide = async (op: string, receipt: string | null) =>
            String((await client.query(`SELECT ${text(`"${schema}".ratekeeper_decide($1, $2, $3, '{2}', '{1000}', $4, $5)`)} AS r`, [codec, ruleArgs, literal([path + key]), op, receipt])).rows[0].r);
          const reserved = (await decide('reserve', null)).slice(1, -1).split(',');
          // Expired with something credited by its refunds: reborn, the row holds none of it.
          await client.query(`UPDATE "${schema}".ratekeeper_state SET expires_at = 0, credited = 3 WHERE key = $1`, [path + key]);
          const acquired = String((await client.query(`SELECT ${text(acquire('$1'))} AS r`, [path + key])).rows[0].r);
          const { credited } = (await client.query(`SELECT credited::text FROM "${schema}".ratekeeper_state WHERE key = $1`, [path + key])).rows[0];
          return [acquired, await decide('refund', `{${reserved.slice(3).join(',')}}`), credited];
        } finally {
          client.release();
        }
      }),
    );
    // Reborn: the acquire finds a new key (4 left), and the refund gives nothing back.
    expect(answers[0]![0]).toMatch(/^\{4,0,/);
    expect(answers[0]![1]).toMatch(/^\{4,/);
    expect(answers[0]![2]).toBe('0');
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]).toEqual(answers[0]);
  });

  for (const codec of codecs) {
    test.prop([rules, traces], { numRuns: 60 })(`${codec}: one key at a time, in batches, and through ratekeeper_decide alike, blocked, in debt, reserved`, async (rule, { startMs, steps }) => {
      const ruleArgs = literal([...sqlPlans[codec].ruleArgs(rule), expirySlackMs(rule)]);
      const prefix = `${Math.random()}:`;
      type Call = { key: string; permits: number; now: number; batch: number; op: (typeof steps)[number]['op']; amount: number };
      const calls: Call[] = [];
      let now = startMs;
      for (const { moveMs, key, share, batch, op, chargePercent, blockMs } of steps) {
        now += moveMs;
        const permits = 1 + Math.floor(share * (rule.limit - 1));
        const charged = Math.min(Number.MAX_SAFE_INTEGER, Math.max(1, Math.floor((rule.limit * chargePercent) / 100)));
        calls.push({ key: prefix + key, permits, now, batch, op, amount: op === 'block' ? blockMs : op === 'charge' ? charged : permits });
      }
      const decide = (path: string, call: Call, receipt: string | null = null) =>
        pool.query(`SELECT ${text(`"${schema}".ratekeeper_decide($1, $2, $3, $4, $5, $6, $7)`)} AS r`, [codec, ruleArgs, literal([path + call.key]), literal([call.amount]), literal([call.now]), call.op, receipt]);
      // Each copy's latest receipt per key: its era is the copy's own.
      const receipts = new Map<string, string>();
      const general: string[] = [];
      const many: string[] = [];
      const one: string[] = [];
      for (let i = 0; i < calls.length; ) {
        const call = calls[i]!;
        if (call.op === 'expire') {
          await pool.query(`UPDATE "${schema}".ratekeeper_state SET expires_at = 0 WHERE key = ANY ($1)`, [paths.map((path) => path + call.key)]);
          i++;
          continue;
        }
        if (call.op !== 'acquire') {
          const answers: string[] = [];
          for (const path of paths) {
            if (call.op === 'refund' && !receipts.has(path + call.key)) continue;
            const reply = String((await decide(path, call, call.op === 'refund' ? receipts.get(path + call.key)! : null)).rows[0].r);
            const numbers = reply.slice(1, -1).split(',');
            // A receipt: the era (the copy's own), then what the codec needs (the same on every path).
            if (call.op === 'reserve') receipts.set(path + call.key, `{${numbers.slice(3).join(',')}}`);
            answers.push([...numbers.slice(0, 3), ...numbers.slice(4)].join(','));
          }
          expect(new Set(answers).size, `${call.op} ${call.key}`).toBeLessThanOrEqual(1);
          i++;
          continue;
        }
        let end = i + 1;
        while (end < Math.min(calls.length, i + call.batch) && calls[end]!.op === 'acquire') end++;
        const batch = calls.slice(i, end);
        i = end;
        const values = (path: string) => [literal(batch.map((c) => path + c.key)), literal(batch.map((c) => c.permits)), literal(batch.map((c) => c.now))];
        // One after the other: a path's reclaim may delete another path's expired rows, and the
        // many-keys function leaves a row another transaction holds undecided (-1, sent again
        // alone by the limiter) where ratekeeper_decide would wait for it.
        const decided = String((await pool.query(`SELECT ${text(`"${schema}".ratekeeper_decide($1, $2, $3, $4, $5, 'acquire')`)} AS r`, [codec, ruleArgs, ...values('g:')])).rows[0].r);
        const fast = String((await pool.query(`SELECT ${text(`"${schema}".${manyKeysFunction(codec)}($1, $2, $3, $4)`)} AS r`, [...values('m:'), ruleArgs])).rows[0].r);
        general.push(decided.slice(1, -1));
        many.push(fast.slice(1, -1));
        for (const c of batch) {
          one.push(String((await pool.query(`SELECT ${text(`"${schema}".${oneKeyFunction(codec)}($1, $2, $3, $4)`)} AS r`, [`o:${c.key}`, c.permits, c.now, ruleArgs])).rows[0].r).slice(1, -1));
        }
      }
      expect(many).toEqual(general);
      expect(one.join(',')).toEqual(general.join(','));
      // The expiries and eras are not compared: each path reads the server's clock and takes its
      // era at its own moment. Blocks are the caller's clock's.
      const stored = async (path: string) =>
        (await pool.query(`SELECT substr(key, 3) AS key, ${text('state')} AS state, blocked_until, credited FROM "${schema}".ratekeeper_state WHERE starts_with(key, $1) ORDER BY 1`, [`${path}${prefix}`])).rows;
      const states = await stored('g:');
      expect(await stored('m:')).toEqual(states);
      expect(await stored('o:')).toEqual(states);
    });
  }
});
