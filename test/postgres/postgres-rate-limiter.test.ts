// What PostgreSQL adds to the store conformance suite (test/stores/postgres-*.test.ts), through both
// src/postgres/sql/schema.ts (batches) and src/postgres/sql/one-key.ts (one call per round trip): the explicit
// migration, statements PgBouncer can carry, rows reclaimed without a timer, exactness where
// limit × windowMs passes 2^53, and its own input checks.
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, expectTypeOf, test } from 'vitest';
import { Rule } from '../../src/index';
import { migrate, PostgresRateLimiter, type PostgresRateLimiterOptions } from '../../src/postgres';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

/** The error `f` throws. */
function thrown(f: () => unknown): unknown {
  try {
    f();
  } catch (error) {
    return error;
  }
  throw new Error('nothing was thrown');
}

describe.skipIf(!postgresPort)('PostgresRateLimiter', () => {
  let pool: pg.Pool;
  const schema = uniqueSchema('limiter');
  beforeAll(async () => {
    pool = new pg.Pool({ ...connection(), max: 8 });
    await migrate(pool, { schema });
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  test('migrate is idempotent and safe to run from many servers at once', async () => {
    const other = uniqueSchema('migrate');
    await Promise.all(Array.from({ length: 5 }, () => migrate(pool, { schema: other })));
    await migrate(pool, { schema: other });
    const limiter = new PostgresRateLimiter({ client: pool, schema: other, algorithm: 'fixed-window', rule: Rule.perMinute(2), onStoreError: 'deny' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    await pool.query(`DROP SCHEMA "${other}" CASCADE`);
  });

  test('nothing is created implicitly: before migrate, a decision is the outage policy, and onError names the missing function', async () => {
    const errors: unknown[] = [];
    const limiter = new PostgresRateLimiter({ client: pool, schema: uniqueSchema('never'), algorithm: 'token-bucket', rule: Rule.perSecond(5), onStoreError: 'deny', onError: (error) => errors.push(error) });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, degraded: 'store-error' });
    expect(String(errors[0])).toMatch(/schema .* does not exist|function .* does not exist/);
  });

  test('the clock is read after the row lock: a decision that waited for the lock is timed after the lock was released, alone or batched', async () => {
    const holder = new pg.Client(connection());
    await holder.connect();
    try {
      const prefix = `lock-${Math.random()}:`;
      const limiter = new PostgresRateLimiter({ client: pool, schema, prefix, algorithm: 'token-bucket', rule: Rule.perSecond(1000), onStoreError: 'deny', timeoutMs: 10_000 });
      await limiter.tryAcquire('a');
      await limiter.tryAcquire('b');
      for (const batch of [['a'], ['a', 'b']]) {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM "${schema}".ratekeeper_state WHERE key LIKE $1 FOR UPDATE`, [`${prefix}%`]);
        const decided = Promise.all(batch.map((key) => limiter.tryAcquire(key)));
        await new Promise((resolve) => setTimeout(resolve, 300));
        const released = Number((await holder.query('SELECT floor(extract(epoch FROM clock_timestamp()) * 1000) AS ms')).rows[0].ms);
        await holder.query('COMMIT');
        await decided;
        // The token bucket stores the time its units were counted at.
        const { rows } = await pool.query(`SELECT state[2] AS at FROM "${schema}".ratekeeper_state WHERE key = $1`, [`${prefix}token-bucket:a`]);
        expect(Number(rows[0].at)).toBeGreaterThanOrEqual(released);
      }
    } finally {
      await holder.end();
    }
  });

  test('no named prepared statement is left on the connection (PgBouncer transaction mode), with pg and postgres.js', async () => {
    const client = new pg.Client(connection());
    await client.connect();
    const sql = postgres({ ...connection(), max: 1, onnotice: () => {} });
    try {
      for (const each of [client, sql]) {
        const limiter = new PostgresRateLimiter({ client: each, schema, algorithm: 'sliding-window-log', rule: Rule.perSecond(5), onStoreError: 'deny' });
        await Promise.all([limiter.tryAcquire('a'), limiter.tryAcquire('b')]);
        await limiter.tryAcquire('a');
      }
      expect((await client.query('SELECT statement FROM pg_prepared_statements')).rows).toEqual([]);
      // postgres.js prepares its own type lookup once per connection (fetch_types: false turns it off).
      expect((await sql.unsafe('SELECT statement FROM pg_prepared_statements')).filter(({ statement }) => String(statement).includes('ratekeeper'))).toEqual([]);
    } finally {
      await client.end();
      await sql.end();
    }
  });

  test.each([true, false])('postgres.js with fetch_types: %s decides, batches and manages keys exactly (its replies are read the same without type information)', async (fetchTypes) => {
    const sql = postgres({ ...connection(), max: 2, fetch_types: fetchTypes, onnotice: () => {} });
    try {
      const errors: unknown[] = [];
      const limiter = new PostgresRateLimiter({ client: sql, schema, algorithm: 'token-bucket', rule: new Rule(3, 1e9), onStoreError: 'allow', prefix: `types-${fetchTypes}:`, onError: (error) => errors.push(error) });
      expect(await limiter.tryAcquire('a')).toStrictEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 333_333_334 });
      // One tick: one statement for the batch.
      const batch = await Promise.all([limiter.tryAcquire('a'), limiter.tryAcquire('b', 3), limiter.tryAcquire('a'), limiter.tryAcquire('a')]);
      expect(batch.map((d) => [d.allowed, d.remaining])).toEqual([
        [true, 1],
        [true, 0],
        [true, 0],
        [false, 0],
      ]);
      expect(await limiter.peek('b', 0)).toMatchObject({ allowed: true, remaining: 0 });
      const reservation = await limiter.reserve('c', 3);
      expect(reservation.decision).toMatchObject({ allowed: true, remaining: 0 });
      expect(await reservation.settle(1)).toMatchObject({ remaining: 2 });
      expect(await limiter.charge('c', 1)).toMatchObject({ remaining: 1 });
      await limiter.block('c', 60_000);
      expect(await limiter.tryAcquire('c')).toMatchObject({ allowed: false, remaining: 0 });
      await limiter.reset('c');
      expect(await limiter.tryAcquire('c')).toMatchObject({ allowed: true, remaining: 2 });
      expect(errors).toEqual([]);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  test('onError receives an Error, typed so: a client failing with anything else has it wrapped, naming PostgreSQL', async () => {
    expectTypeOf<NonNullable<PostgresRateLimiterOptions['onError']>>().parameter(0).toEqualTypeOf<Error>();
    const errors: Error[] = [];
    // An adapter of the user's (anything with pg's query) that fails with a string.
    const client = { query: () => Promise.reject('connection refused') };
    const limiter = new PostgresRateLimiter({ client, algorithm: 'token-bucket', rule: Rule.perSecond(1), onStoreError: 'deny', onError: (error: Error) => errors.push(error) });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, degraded: 'store-error' });
    await expect(limiter.charge('k', 1)).rejects.toBe('connection refused');
    expect(await limiter.peek('k')).toMatchObject({ degraded: 'store-error' });
    expect(errors).toHaveLength(2);
    for (const error of errors) {
      expect(error).toBeInstanceOf(Error);
      expect(error).toMatchObject({ message: 'ratekeeper: the PostgreSQL client failed with connection refused', code: 'ERR_RATEKEEPER_STORE_ERROR', cause: 'connection refused' });
    }
  });

  test('expired rows are reclaimed by the rows inserted after them: no timer, no sweep of the table', async () => {
    // A schema of its own: expired rows of other tests would take a share of the reclaiming.
    const own = uniqueSchema('reclaim');
    await migrate(pool, { schema: own });
    const count = async () => Number((await pool.query(`SELECT count(*) AS n FROM "${own}".ratekeeper_state`)).rows[0].n);
    const short = new PostgresRateLimiter({ client: pool, schema: own, algorithm: 'token-bucket', rule: new Rule(1, 300), onStoreError: 'deny' });
    await Promise.all(Array.from({ length: 100 }, (_, i) => short.tryAcquire(`old-${i}`)));
    expect(await count()).toBe(100);
    // Expiries sit on a one-second grid: past the next whole second, every old row has expired.
    await new Promise((resolve) => setTimeout(resolve, 1_350));
    // Each new row deletes up to two expired ones: 50 new keys leave none of the 100 old ones.
    for (let i = 0; i < 50; i++) await short.tryAcquire(`new-${i}`);
    expect(await count()).toBe(50);
    await pool.query(`DROP SCHEMA "${own}" CASCADE`);
  });

  test('a refusal writes nothing: the row is as the last grant left it', async () => {
    const prefix = `refusal-${Math.random()}:`;
    const limiter = new PostgresRateLimiter({ client: pool, schema, prefix, algorithm: 'sliding-window-log', rule: Rule.perMinute(2), onStoreError: 'deny' });
    await limiter.tryAcquire('k', 2);
    const row = async () => (await pool.query(`SELECT state, expires_at, xmin::text FROM "${schema}".ratekeeper_state WHERE starts_with(key, $1)`, [prefix])).rows;
    const before = await row();
    for (let i = 0; i < 5; i++) expect((await limiter.tryAcquire('k')).allowed).toBe(false);
    expect(await row()).toEqual(before);
  });

  test('exact where limit × windowMs passes 2^53: a token bucket of 2^53 - 1 per 2^42 - 1 ms, in BigInt', async () => {
    const L = 2n ** 53n - 1n;
    const W = 2n ** 42n - 1n; // gcd(L, W) = 1: a unit per ms is L, a token W units, the bucket L·W
    const ceil = (n: bigint, d: bigint) => (n + d - 1n) / d;
    let now = 1_000_000;
    const clock = { now: () => now };
    const limiter = new PostgresRateLimiter({ client: pool, schema, prefix: `wide-${Math.random()}:`, algorithm: 'token-bucket', rule: new Rule(Number(L), Number(W)), onStoreError: 'deny', clock });
    expect(await limiter.tryAcquire('k', Number(L))).toStrictEqual({ allowed: true, limit: Number(L), remaining: 0, retryAfterMs: 0, resetAfterMs: Number(W) });
    expect(await limiter.tryAcquire('k')).toStrictEqual({ allowed: false, limit: Number(L), remaining: 0, retryAfterMs: Number(ceil(W, L)), resetAfterMs: Number(W) });
    now += 1;
    const left = L - W;
    expect(await limiter.tryAcquire('k')).toStrictEqual({ allowed: true, limit: Number(L), remaining: Number(left / W), retryAfterMs: 0, resetAfterMs: Number(ceil(L * W - left, L)) });
  });

  test('checks its input before anything is sent', async () => {
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule: Rule.perSecond(3), onStoreError: 'deny' });
    await expect(limiter.tryAcquire('a\u0000b')).rejects.toMatchObject({ name: 'TypeError', message: 'ratekeeper: `key` must be a string without U+0000, got "a\\u0000b"', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    await expect(limiter.tryAcquire('k', 4)).rejects.toThrow(RangeError);
    // A lone surrogate has no UTF-8 form: both clients sent U+FFFD, so 'k\uD800' shared the row of 'k\uFFFD'.
    for (const key of ['k\uD800', 'k\uDFFF', '\uDBFFk']) {
      await expect(limiter.tryAcquire(key)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
      await expect(limiter.peek(key)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
      await expect(limiter.charge(key, 1)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    }
    for (const prefix of ['p\uD800:', 'p\u0000:']) {
      expect(() => new PostgresRateLimiter({ client: pool, schema, prefix, algorithm: 'fixed-window', rule: Rule.perSecond(3), onStoreError: 'deny' })).toThrow(TypeError);
    }
    expect(thrown(() => new PostgresRateLimiter({ client: {} as never, algorithm: 'fixed-window', rule: Rule.perSecond(3), onStoreError: 'deny' }))).toMatchObject({ name: 'TypeError', message: 'ratekeeper: `client` must be a pg Pool or Client, or a postgres.js sql, got an object', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    expect(() => new PostgresRateLimiter({ client: pool, algorithm: 'gcra' as never, rule: Rule.perSecond(3), onStoreError: 'deny' })).toThrow(TypeError);
    expect(() => new PostgresRateLimiter({ client: pool, schema: '', algorithm: 'fixed-window', rule: Rule.perSecond(3), onStoreError: 'deny' })).toThrow(RangeError);
    await expect(migrate(pool, { schema: 42 as never })).rejects.toMatchObject({ name: 'TypeError', message: 'ratekeeper: `schema` must be a string, got 42', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
  });

  test('close() ends waiting (ERR_RATEKEEPER_CLOSED) and tryAcquire still answers; JSON shows the settings, never the client', async () => {
    const limiter = new PostgresRateLimiter({ client: pool, schema, prefix: `close-${Math.random()}:`, algorithm: 'fixed-window', rule: new Rule(1, 60_000), onStoreError: 'deny' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true });
    const waiting = limiter.acquire('k').catch((error: { code?: string }) => error.code);
    await new Promise((resolve) => setTimeout(resolve, 50));
    limiter.close();
    expect(await waiting).toBe('ERR_RATEKEEPER_CLOSED');
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false });
    expect(JSON.parse(JSON.stringify(limiter))).toEqual({ algorithm: 'fixed-window', rule: { limit: 1, windowMs: 60_000 }, schema, prefix: expect.stringMatching(/^close-/), timeoutMs: 500 });
  });

  test('a schema name is quoted, never spliced: any name works', async () => {
    const odd = `we"ird ${Math.random()}; DROP TABLE x`;
    await migrate(pool, { schema: odd });
    const limiter = new PostgresRateLimiter({ client: pool, schema: odd, algorithm: 'sliding-window-counter', rule: Rule.perSecond(3), onStoreError: 'deny' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 2 });
    await pool.query(`DROP SCHEMA "${odd.replaceAll('"', '""')}" CASCADE`);
  });
});
