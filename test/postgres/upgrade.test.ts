// An upgrade forgives nothing: the previous version (its migration printed into
// fixtures/schema-v2.sql) kept each key's row under a row key holding the rule
// (`prefix + algorithm + ':' + limit + '/' + windowMs + ':' + key`, hashed past 2000 bytes). Rows
// written by that version's own functions, then `migrate`, then the new limiter: each key's first
// call adopts its old row (counts, debt and block) and deletes it, and every decision equals the
// in-memory twin that saw the whole history. Meanwhile the previous version's functions keep
// working on their own rows (a rolling deploy), and the table is never rewritten.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { migrate, PostgresRateLimiter } from '../../src/postgres';
import { scaledUnits } from '../../src/algorithms/token-bucket';
import { manyKeysParams, rowKeyHeads, ruleNumbers } from '../../src/postgres/protocol';
import { manyKeysFunction, SKIPPED } from '../../src/postgres/sql/shell';
import { codecs } from '../../src/postgres/plans';
import { expirySlackMs } from '../../src/store/constants';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

const rule = new Rule(10, 60_000);

/** The previous version's rule numbers: its token bucket read {limit, perMs, perToken}, its windows {limit, windowMs}; the slack last. */
function previousRuleArgs(algorithm: string): string {
  const numbers = algorithm.endsWith('bucket') ? [rule.limit, scaledUnits(rule).perMs, scaledUnits(rule).perToken] : [rule.limit, rule.windowMs];
  return `{${[...numbers, expirySlackMs(rule.windowMs)].join(',')}}`;
}

const codecOf = (algorithm: string) => (algorithm === 'leaky-bucket' ? 'token-bucket' : algorithm);

describe.skipIf(!postgresPort)('an upgrade from the previous row layout', () => {
  let pool: pg.Pool;
  let schema: string;
  beforeAll(async () => {
    pool = new pg.Pool({ ...connection(), max: 2 });
    schema = uniqueSchema('upgrade');
    await pool.query((await readFile(new URL('fixtures/schema-v2.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${schema}"`));
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  const file = async () => (await pool.query(`SELECT relfilenode FROM pg_class WHERE oid = to_regclass($1)`, [`"${schema}".ratekeeper_state`])).rows[0].relfilenode;

  test('rows the previous version wrote are adopted by each key\'s first call: nothing forgiven, blocks kept, the old rows gone; the old functions keep working beside', async () => {
    const clock = new ManualClock(1_000_000);
    const long = 'x'.repeat(2_100);
    const twins_ = new Map<string, KeyedRateLimiter>();
    /** The previous version's call on `key`, through its own functions, and the same on the twin. */
    const previous = async (algorithm: string, key: string, op: 'acquire' | 'charge' | 'block', amount: number) => {
      const twin = twins_.get(algorithm)!;
      const rowKey = `up:${algorithm}:${rule.limit}/${rule.windowMs}:${key}`;
      const args = previousRuleArgs(algorithm);
      if (op === 'acquire') {
        await pool.query(`SELECT "${schema}".ratekeeper_acquire_${codecOf(algorithm).replaceAll('-', '_')}($1, $2, $3, $4)`, [rowKey, amount, clock.now(), args]);
        twin.tryAcquire(key, amount);
      } else {
        const keys = `{"${rowKey}"}`;
        await pool.query(`SELECT "${schema}".ratekeeper_decide($1, $2, $3, $4, $5, $6)`, [codecOf(algorithm), args, keys, `{${amount}}`, `{${clock.now()}}`, op]);
        if (op === 'charge') twin.charge(key, amount);
        else twin.block(key, amount);
      }
    };
    for (const algorithm of algorithmNames) {
      twins_.set(algorithm, new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock }));
      await previous(algorithm, 'used', 'acquire', 7);
      await previous(algorithm, 'debt', 'charge', 15);
      await previous(algorithm, 'blocked', 'acquire', 2);
      await previous(algorithm, 'blocked', 'block', 90_000);
      await previous(algorithm, long, 'acquire', 4);
    }
    // The previous version hashed a row key past 2000 bytes, as the new one does.
    const digest = `sha256/${createHash('sha256').update(`up:fixed-window:10/60000:${long}`).digest('hex')}`;
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".ratekeeper_state WHERE key = $1`, [digest])).rows[0].n).toBe(1);

    const before = await file();
    await migrate(pool, { schema });
    expect(await file()).toBe(before);
    clock.advance(1_000);
    for (const algorithm of algorithmNames) {
      const twin = twins_.get(algorithm)!;
      const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm, rule, onStoreError: 'deny', clock, prefix: 'up:' });
      for (const key of ['used', 'debt', 'blocked', long]) {
        // A peek reads the old row without taking it; the first decision takes it.
        expect(await limiter.peek(key, 0), `${algorithm} ${key.slice(0, 8)}`).toStrictEqual(twin.peek(key, 0));
        expect(await limiter.tryAcquire(key, 2), `${algorithm} ${key.slice(0, 8)}`).toStrictEqual(twin.tryAcquire(key, 2));
        expect(await limiter.tryAcquire(key, 1)).toStrictEqual(twin.tryAcquire(key, 1));
      }
    }
    // Every old row was adopted and deleted: the rows now are the new layout's, each with its rule.
    const { rows } = await pool.query(`SELECT key, rule_limit::int, rule_window_ms::int FROM "${schema}".ratekeeper_state ORDER BY key`);
    expect(rows.every((row: { key: string; rule_limit: number; rule_window_ms: number }) => !row.key.includes('10/60000') && row.rule_limit === 10 && row.rule_window_ms === 60_000)).toBe(true);
    expect(rows).toHaveLength(algorithmNames.length * 4);

    // A process of the previous version, still running, decides on its own row as before: counted
    // apart from the new row meanwhile (the rolling deploy the CHANGELOG describes).
    const args = previousRuleArgs('fixed-window');
    const old = await pool.query(`SELECT array_to_string("${schema}".ratekeeper_acquire_fixed_window($1, 3, $2, $3), ',') AS r`, ['up:fixed-window:10/60000:used', clock.now(), args]);
    expect(old.rows[0].r.split(',').slice(0, 2)).toEqual(['7', '0']);
    // The key's new row, live, is what the new version counts by; the old row would be adopted
    // only by a call finding no row of the key's own (not even an expired one).
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule, onStoreError: 'deny', clock, prefix: 'up:' });
    const twin = twins_.get('fixed-window')!;
    expect(await limiter.peek('used', 0)).toStrictEqual(twin.peek('used', 0));
  });

  test('several servers upgrading the previous schema at once: each migrate resolves, the table keeps its file and rows', async () => {
    const other = uniqueSchema('upgrade_many');
    await pool.query((await readFile(new URL('fixtures/schema-v2.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${other}"`));
    await pool.query(`INSERT INTO "${other}".ratekeeper_state (key, state, expires_at) VALUES ('up:fixed-window:10/60000:k', '{0,4}', 9000000000000)`);
    const relfilenode = async () => (await pool.query(`SELECT relfilenode FROM pg_class WHERE oid = to_regclass($1)`, [`"${other}".ratekeeper_state`])).rows[0].relfilenode;
    const before = await relfilenode();
    const servers = Array.from({ length: 4 }, () => new pg.Pool({ ...connection(), max: 1 }));
    try {
      await Promise.all(servers.map((server) => migrate(server, { schema: other })));
    } finally {
      await Promise.all(servers.map((server) => server.end()));
    }
    expect(await relfilenode()).toBe(before);
    const limiter = new PostgresRateLimiter({ client: pool, schema: other, algorithm: 'fixed-window', rule, onStoreError: 'deny', clock: new ManualClock(0), prefix: 'up:' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 5 });
    await pool.query(`DROP SCHEMA "${other}" CASCADE`);
  });

  test('a key the new version took over does not adopt again once its row has expired: what an old process counted meanwhile (a rolling deploy) stays apart on every path; a key whose row is gone (reclaimed) adopts it', async () => {
    const other = uniqueSchema('upgrade_rolling');
    await pool.query((await readFile(new URL('fixtures/schema-v2.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${other}"`));
    await migrate(pool, { schema: other });
    const clock = new ManualClock(2_000_000);
    const rows = async (like: string) =>
      (await pool.query(`SELECT key, state::text AS state FROM "${other}".ratekeeper_state WHERE key LIKE $1 ORDER BY key`, [like])).rows as { key: string; state: string }[];
    /** The previous version's acquire of `permits` on `key`, through its own function: its remaining. */
    const previous = async (algorithm: string, key: string, permits: number) =>
      Number(
        (
          await pool.query(`SELECT ("${other}".ratekeeper_acquire_${codecOf(algorithm).replaceAll('-', '_')}($1, $2, $3, $4))[1]::text AS r`, [
            `roll:${algorithm}:${rule.limit}/${rule.windowMs}:${key}`,
            permits,
            clock.now(),
            previousRuleArgs(algorithm),
          ])
        ).rows[0].r,
      );
    try {
      for (const algorithm of algorithmNames) {
        const limiter = new PostgresRateLimiter({ client: pool, schema: other, algorithm, rule, onStoreError: 'deny', clock, prefix: 'roll:' });
        // The new version takes each key over (nothing to adopt yet), then an old process, still
        // running, counts 7 on each key's previous-layout row and blocks one of them.
        const keys = ['one', 'batch-a', 'batch-b', 'charged', 'peeked', 'blocked'];
        for (const key of keys) expect(await limiter.tryAcquire(key, 1)).toMatchObject({ remaining: 9 });
        for (const key of keys) expect(await previous(algorithm, key, 7)).toBe(3);
        await pool.query(`SELECT "${other}".ratekeeper_decide($1, $2, $3, '{90000}', $4, 'block')`, [
          codecOf(algorithm),
          previousRuleArgs(algorithm),
          `{"roll:${algorithm}:10/60000:blocked"}`,
          `{${clock.now()}}`,
        ]);
        // Each new row expires (as the server's clock would move it past), but stays in the table.
        await pool.query(`UPDATE "${other}".ratekeeper_state SET expires_at = 0 WHERE key LIKE $1 AND rule_limit IS NOT NULL`, [`roll:${algorithm}:%`]);
        const context = (key: string) => `${algorithm} ${key}`;
        // The one-key function, the batch function, the general one (a charge, a peek) and a
        // block adopt nothing: the key starts over on the new version, its old row counted apart.
        expect(await limiter.tryAcquire('one', 2), context('one')).toMatchObject({ allowed: true, remaining: 8 });
        const batch = await Promise.all([limiter.tryAcquire('batch-a', 2), limiter.tryAcquire('batch-b', 2)]);
        expect(batch, context('batch')).toMatchObject([{ remaining: 8 }, { remaining: 8 }]);
        expect(await limiter.charge('charged', 2), context('charged')).toMatchObject({ remaining: 8 });
        expect(await limiter.peek('peeked', 0), context('peeked')).toMatchObject({ allowed: true, remaining: 10 });
        expect(await limiter.tryAcquire('blocked', 2), context('blocked')).toMatchObject({ allowed: true, remaining: 8 });
        // Every old row is still there, and the old process still counts on it.
        expect(await rows(`roll:${algorithm}:10/60000:%`), algorithm).toHaveLength(keys.length);
        expect(await previous(algorithm, 'one', 1), context('one')).toBe(2);
        // A key whose row is gone (reclaimed once expired) finds none of its own: it adopts the old row.
        await pool.query(`DELETE FROM "${other}".ratekeeper_state WHERE key = $1`, [`roll:${algorithm}:one`]);
        expect(await limiter.tryAcquire('one', 1), context('one')).toMatchObject({ allowed: true, remaining: 1 });
        expect(await rows(`roll:${algorithm}:10/60000:one`), algorithm).toHaveLength(0);
      }
    } finally {
      await pool.query(`DROP SCHEMA "${other}" CASCADE`);
    }
  });

  test('a batch never waits for a previous-layout row another transaction holds: that key is undecided; a free one is adopted, a key without one starts new', async () => {
    const other = uniqueSchema('upgrade_batch');
    await pool.query((await readFile(new URL('fixtures/schema-v2.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${other}"`));
    await migrate(pool, { schema: other });
    const holder = new pg.Client(connection());
    await holder.connect();
    try {
      const now = 3_000_000;
      const args = previousRuleArgs('fixed-window');
      for (const key of ['held', 'free']) {
        await pool.query(`SELECT "${other}".ratekeeper_acquire_fixed_window($1, 6, $2, $3)`, [`b:fixed-window:10/60000:${key}`, now, args]);
      }
      await holder.query('BEGIN');
      await holder.query(`SELECT FROM "${other}".ratekeeper_state WHERE key = 'b:fixed-window:10/60000:held' FOR UPDATE`);
      const batch = async () => {
        const calls = ['fresh', 'free', 'held'].map((key) => ({ key, permits: 1, now, rule: ruleNumbers('fixed-window', rule) }));
        const { rows } = await pool.query(
          `SELECT array_to_string("${other}".${manyKeysFunction(codecs['fixed-window'])}($1, $2, $3, $4, $5, $6), ',') AS r`,
          manyKeysParams(rowKeyHeads('b:', 'fixed-window'), calls),
        );
        return (rows[0].r as string).split(',').map(Number);
      };
      // Remaining, retryAfterMs, resetAfterMs per key, in the order asked.
      const first = await batch();
      expect(first.slice(0, 2)).toEqual([9, 0]);
      expect(first.slice(3, 5)).toEqual([3, 0]);
      expect(first.slice(6)).toEqual([SKIPPED, SKIPPED, SKIPPED]);
      await holder.query('COMMIT');
      const second = await batch();
      expect([second[0], second[3], second[6]]).toEqual([8, 2, 3]);
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${other}".ratekeeper_state WHERE rule_limit IS NULL`);
      expect(rows[0].n).toBe(0);
    } finally {
      await holder.end();
      await pool.query(`DROP SCHEMA "${other}" CASCADE`);
    }
  });

  test('a key the previous version never wrote starts new, and a row of the previous layout sitting at a new row key (another key\'s) is not taken for the key\'s own', async () => {
    const clock = new ManualClock(5_000_000);
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule, onStoreError: 'deny', clock, prefix: 'other:' });
    expect(await limiter.tryAcquire('fresh')).toMatchObject({ allowed: true, remaining: 9 });
    // The previous version's row for key 'k' is, character for character, the new row key of the key '10/60000:k'.
    const args = previousRuleArgs('fixed-window');
    await pool.query(`SELECT "${schema}".ratekeeper_acquire_fixed_window($1, 10, $2, $3)`, ['other:fixed-window:10/60000:k', clock.now(), args]);
    expect(await limiter.tryAcquire('10/60000:k')).toMatchObject({ allowed: true, remaining: 9 });
  });
});
