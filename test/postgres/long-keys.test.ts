// Keys of any length are limited exactly over PostgreSQL: a row key past a B-tree entry's 2704
// bytes used to fail at the server ("index row size ... exceeds btree version 4 maximum 2704"), so
// under 'allow' the key was let through unlimited, and the keys batched with it with it.
import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Rule } from '../../src/index';
import { migrate, type PostgresClientLike, PostgresRateLimiter } from '../../src/postgres';
import { LONG_KEY_BYTES } from '../../src/postgres/sql/shell';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

describe.skipIf(!postgresPort)('PostgreSQL: keys of any length', () => {
  const schema = uniqueSchema('long');
  let pool: pg.Pool;
  let sql: postgres.Sql;
  beforeAll(async () => {
    pool = new pg.Pool({ ...connection(), max: 4 });
    sql = postgres({ ...connection(), max: 4, onnotice: () => {} });
    await migrate(pool, { schema });
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
    await sql.end({ timeout: 1 });
  });

  const clients = (): [string, PostgresClientLike][] => [
    ['pg', pool],
    ['postgres.js', sql],
  ];

  test.each(['fixed-window', 'token-bucket', 'sliding-window-log', 'sliding-window-counter', 'leaky-bucket'] as const)(
    '%s: 5 calls on a 3000-character key under a limit of 2 allow 2; batched with an exhausted key, a long key frees neither',
    async (algorithm) => {
      for (const [name, client] of clients()) {
        const errors: unknown[] = [];
        const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule: new Rule(2, 1e9), onStoreError: 'allow', prefix: `long-${name}:`, onError: (error) => errors.push(error) });
        // Incompressible, as real key material is (PostgreSQL compresses a repetitive one into the index).
        const long = randomBytes(2250).toString('base64');
        const decisions = [];
        for (let i = 0; i < 5; i++) decisions.push(await limiter.tryAcquire(long));
        expect(decisions.map((d) => [d.allowed, d.remaining, d.degraded])).toEqual([
          [true, 1, undefined],
          [true, 0, undefined],
          [false, 0, undefined],
          [false, 0, undefined],
          [false, 0, undefined],
        ]);
        // One tick: one statement through the many-keys function, the long keys beside the exhausted one.
        const other = `é${randomBytes(3750).toString('base64')}`;
        const batch = await Promise.all([limiter.tryAcquire('spent'), limiter.tryAcquire('spent'), limiter.tryAcquire(long), limiter.tryAcquire('spent'), limiter.tryAcquire(other)]);
        expect(batch.map((d) => [d.allowed, d.remaining, d.degraded])).toEqual([
          [true, 1, undefined],
          [true, 0, undefined],
          [false, 0, undefined],
          [false, 0, undefined],
          [true, 1, undefined],
        ]);
        expect(errors).toEqual([]);
        // Every other method reaches the same row.
        expect(await limiter.peek(long, 0)).toMatchObject({ allowed: true, remaining: 0 });
        await limiter.reset(long);
        expect(await limiter.peek(long)).toMatchObject({ allowed: true, remaining: 1 });
        await limiter.block(other, 60_000);
        expect(await limiter.tryAcquire(other)).toMatchObject({ allowed: false, remaining: 0 });
        expect((await limiter.charge(long, 2)).remaining).toBe(0);
        expect(await limiter.tryAcquire(long)).toMatchObject({ allowed: false });
      }
    },
  );

  test('a key that fits is stored as it is (an upgrade forgives nothing); a longer one as the digest of its row key, which no plain key can be', async () => {
    const prefix = 'digest:';
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule: new Rule(1, 1e9), onStoreError: 'deny', prefix });
    const keyPrefix = `${prefix}fixed-window:`;
    // The longest key stored as it is, and one a byte longer (a two-byte character at the end).
    const fits = 'a'.repeat(LONG_KEY_BYTES - keyPrefix.length);
    const over = `${'a'.repeat(LONG_KEY_BYTES - keyPrefix.length - 1)}é`;
    await limiter.tryAcquire(fits);
    await limiter.tryAcquire(over);
    const digest = `sha256/${createHash('sha256').update(keyPrefix + over).digest('hex')}`;
    const { rows } = await pool.query<{ key: string }>(`SELECT key FROM "${schema}".ratekeeper_state WHERE key = ANY ($1) ORDER BY length(key)`, [[keyPrefix + fits, digest]]);
    expect(rows.map((row) => row.key)).toEqual([digest, keyPrefix + fits]);
    // The digest's own text, and the long key's row key, are keys of their own: neither is the long key's row.
    expect(await limiter.tryAcquire(digest)).toMatchObject({ allowed: true });
    expect(await limiter.tryAcquire(keyPrefix + over)).toMatchObject({ allowed: true });
    expect(await limiter.tryAcquire(over)).toMatchObject({ allowed: false });
  });
});
