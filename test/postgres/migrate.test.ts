// `migrate` beside live traffic: on a schema already up to date it changes and locks nothing (a
// reader holding the table, as pg_dump or a report does, used to queue every decision behind
// migrate's ALTER TABLE); on an older table it adds only what is missing, never rewriting it, and
// gives up after its lock_timeout rather than queue decisions for ever; and any schema name works.
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Concurrency, Rule } from '../../src/index';
import { migrate, PostgresRateLimiter } from '../../src/postgres';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

describe.skipIf(!postgresPort)('migrate', () => {
  let pool: pg.Pool;
  beforeAll(() => {
    pool = new pg.Pool({ ...connection(), max: 4 });
  });
  afterAll(async () => {
    await pool.end();
  });

  /** Opens a transaction on a connection of its own that reads the table, holding its ACCESS SHARE lock until `release`. */
  async function reader(schema: string): Promise<{ release(): Promise<void> }> {
    const client = new pg.Client(connection());
    await client.connect();
    await client.query('BEGIN');
    await client.query(`SELECT count(*) FROM "${schema}".ratekeeper_state`);
    return {
      release: async () => {
        await client.query('COMMIT');
        await client.end();
      },
    };
  }

  /**
   * Upgrades `schema`, an older table: behind a reader the change gives up after its lock_timeout;
   * once the reader is gone it is made, without rewriting the table (its file stays).
   */
  async function upgradeBehindReader(schema: string): Promise<void> {
    const file = async () => (await pool.query(`SELECT relfilenode FROM pg_class WHERE oid = to_regclass($1)`, [`"${schema}".ratekeeper_state`])).rows[0].relfilenode;
    const before = await file();
    const held = await reader(schema);
    try {
      await expect(migrate(pool, { schema })).rejects.toMatchObject({ code: '55P03', message: expect.stringMatching(/lock timeout/) });
    } finally {
      await held.release();
    }
    await migrate(pool, { schema });
    expect(await file()).toBe(before);
  }

  /** What migrate may change: the functions' and the table's catalog rows (their xmin moves with any change) and the table's file. */
  const catalog = async (schema: string) =>
    (
      await pool.query(
        `SELECT p.proname || '(' || oidvectortypes(p.proargtypes) || ') ' || p.xmin AS entry FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
         UNION ALL SELECT 'table ' || c.xmin || ' ' || c.relfilenode FROM pg_class c WHERE c.oid = to_regclass($2)
         UNION ALL SELECT 'column ' || a.attname || ' ' || a.xmin FROM pg_attribute a WHERE a.attrelid = to_regclass($2) AND a.attnum > 0
         ORDER BY 1`,
        [`"${schema}"`, `"${schema}".ratekeeper_state`],
      )
    ).rows.map((row: { entry: string }) => row.entry);

  /** Resolves once `settled()` holds or a session waits for a lock on the table. */
  async function settledOrWaiting(schema: string, settled: () => boolean): Promise<void> {
    for (;;) {
      if (settled()) return;
      const { rows } = await pool.query(`SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = to_regclass($1)`, [`"${schema}".ratekeeper_state`]);
      if (Number(rows[0].n) > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  test('on a schema already up to date, with a reader holding the table: migrate changes and locks nothing, returns, and decisions keep flowing', async () => {
    const schema = uniqueSchema('current');
    await migrate(pool, { schema });
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError: 'deny', timeoutMs: 5_000 });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 4 });
    const before = await catalog(schema);
    const held = await reader(schema);
    let migrated = false;
    const migrating = migrate(pool, { schema }).then(() => (migrated = true));
    try {
      await settledOrWaiting(schema, () => migrated);
      // Had migrate asked for the table's lock, this decision would queue behind it until the reader ends.
      expect(await limiter.tryAcquire('k')).toStrictEqual({ allowed: true, limit: 5, remaining: 3, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
      expect(migrated).toBe(true);
    } finally {
      await held.release();
      await migrating;
    }
    expect(await catalog(schema)).toEqual(before);
    // A table dropped by hand (to clear every key) is made again.
    await pool.query(`DROP TABLE "${schema}".ratekeeper_state`);
    await migrate(pool, { schema });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 4 });
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  });

  test('an older table gets only what it lacks, never rewritten, its rows kept; behind a reader the change gives up after its lock_timeout', async () => {
    const schema = uniqueSchema('older');
    const v1 = (await readFile(new URL('fixtures/schema-v1.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${schema}"`);
    await pool.query(v1);
    await pool.query(`INSERT INTO "${schema}".ratekeeper_state (key, state, expires_at) VALUES ('kept', '{1,2}', 9000000000000)`);
    await upgradeBehindReader(schema);
    const { rows } = await pool.query(`SELECT key, state::text, blocked_until, rule_limit, receipts FROM "${schema}".ratekeeper_state`);
    expect(rows).toEqual([{ key: 'kept', state: '{1,2}', blocked_until: null, rule_limit: null, receipts: null }]);
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule: new Rule(2, 60_000), onStoreError: 'deny' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  });

  test('the schema before in-flight limits (fixtures/schema-v3.sql): its rows kept and decided on, the leases column added without a rewrite, a concurrency limiter works; behind a reader the change gives up after its lock_timeout', async () => {
    const schema = uniqueSchema('pre-leases');
    const v3 = (await readFile(new URL('fixtures/schema-v3.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${schema}"`);
    await pool.query(v3);
    const options = { client: pool, schema, algorithm: 'fixed-window', rule: new Rule(5, 2 ** 40), onStoreError: 'deny', timeoutMs: 5_000 } as const;
    // Rows written by that version's own functions.
    await pool.query(`SELECT "${schema}".ratekeeper_acquire_one_fixed_window('old:fixed-window:', 'old:fixed-window:', 'k', 3, NULL, '{5,${2 ** 40},60000}')`);
    await upgradeBehindReader(schema);
    const { rows } = await pool.query(`SELECT key, leases FROM "${schema}".ratekeeper_state`);
    expect(rows).toEqual([{ key: 'old:fixed-window:k', leases: null }]);
    // The plain limiter carries on from the row as it was; one with concurrency on the same row adds its leases.
    expect(await new PostgresRateLimiter({ ...options, prefix: 'old:' }).tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    const leased = new PostgresRateLimiter({ ...options, prefix: 'new:', concurrency: new Concurrency(1) });
    const lease = await leased.lease('k');
    expect(lease.decision).toMatchObject({ allowed: true, limit: 1, remaining: 0 });
    expect((await leased.reserve('k')).decision).toMatchObject({ allowed: false, limit: 1 });
    await lease.settle(1);
    // The in-flight permit is back; the rate keeps the one it spent (the fewest left binds: 1 of 1).
    expect(await leased.peek('k', 0)).toMatchObject({ limit: 1, remaining: 1 });
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  });

  test.each(['a$$b', 'x$fn$y', '$rk$', '$rk$$rk1$', `q'"\\$1$`, 'ends$'])('works in a schema named %s, with pg and postgres.js', async (name) => {
    const sql = postgres({ ...connection(), max: 1, onnotice: () => {} });
    try {
      const schema = `${name}_${uniqueSchema('d').slice(-6)}`;
      await migrate(pool, { schema });
      await migrate(sql, { schema });
      for (const client of [pool, sql]) {
        const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'sliding-window-counter', rule: new Rule(2, 60_000), onStoreError: 'deny', prefix: `${client === pool ? 'pg' : 'js'}:` });
        expect(await Promise.all([limiter.tryAcquire('k'), limiter.tryAcquire('k'), limiter.tryAcquire('k')])).toMatchObject([{ allowed: true }, { allowed: true }, { allowed: false }]);
        expect(await limiter.peek('k', 0)).toStrictEqual({ allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
      }
      await pool.query(`DROP SCHEMA "${schema.replaceAll('"', '""')}" CASCADE`);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});
