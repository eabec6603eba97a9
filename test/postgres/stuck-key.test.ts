// One key whose row another transaction holds (a real second connection in `SELECT ... FOR UPDATE`,
// as a report or a stuck migration would) must hold back that key's calls only: every other key
// decides as if nothing were wrong, the stuck key answers by the outage policy at its timeout, and
// its statement gives up the wait on the server (lock_timeout) so no connection stays pinned.
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Rule } from '../../src/index';
import { migrate, type PostgresClientLike, PostgresRateLimiter } from '../../src/postgres';
import { connection, pgbouncerPort, postgresPort, stuckStatements, uniqueSchema } from '../stores/support/postgres-store';

// Generous: the other keys must be answered within it on a loaded shared machine, and they are
// only degraded (the fact asserted) if they wait behind the stuck key.
const TIMEOUT_MS = 2_000;

describe.skipIf(!postgresPort)('one stuck key holds back its own calls only', { timeout: 60_000 }, () => {
  const schema = uniqueSchema('stuck');
  let admin: pg.Pool;
  beforeAll(async () => {
    admin = new pg.Pool({ ...connection(), max: 2 });
    await migrate(admin, { schema });
  });
  afterAll(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  /** Holds `key`'s row of `prefix` in an open transaction on a connection of its own; resolves with the commit. */
  async function hold(prefix: string, key: string): Promise<{ release(): Promise<void> }> {
    const holder = new pg.Client(connection());
    await holder.connect();
    await holder.query('BEGIN');
    const { rows } = await holder.query(`SELECT key FROM "${schema}".ratekeeper_state WHERE key = $1 FOR UPDATE`, [`${prefix}fixed-window:${key}`]);
    expect(rows).toHaveLength(1);
    return {
      release: async () => {
        await holder.query('COMMIT');
        await holder.end();
      },
    };
  }

  type Open = () => { client: PostgresClientLike; end(): Promise<void> };
  const pgPool =
    (port: number): Open =>
    () => {
      const pool = new pg.Pool({ ...connection(port), max: 3 });
      return { client: pool, end: () => pool.end() };
    };
  const postgresJs =
    (port: number): Open =>
    () => {
      const sql = postgres({ ...connection(port), max: 3, fetch_types: port !== pgbouncerPort, onnotice: () => {} });
      return { client: sql, end: () => sql.end({ timeout: 1 }) };
    };
  const clients: [string, Open][] = [
    ['pg', pgPool(postgresPort)],
    ['postgres.js', postgresJs(postgresPort)],
    // Through PgBouncer in transaction mode: lock_timeout is set for the statement's own transaction.
    ...(pgbouncerPort === 0
      ? []
      : ([
          ['pg through PgBouncer', pgPool(pgbouncerPort)],
          ['postgres.js through PgBouncer', postgresJs(pgbouncerPort)],
        ] as [string, Open][])),
  ];

  test.each(clients)(
    '%s: a row held by another transaction: the other keys, asked beside it and after it, decide on time; the stuck key answers by the policy at its timeout and gives up its wait',
    async (name, open) => {
      const { client, end } = open();
      const prefix = `stuck-${name.replaceAll(' ', '-')}:`;
      const errors: unknown[] = [];
      const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'fixed-window', rule: new Rule(2, 1e12), onStoreError: 'allow', timeoutMs: TIMEOUT_MS, prefix, onError: (error) => errors.push(error) });
      try {
        expect(await limiter.tryAcquire('stuck')).toMatchObject({ allowed: true, remaining: 1 });
        const held = await hold(prefix, 'stuck');
        try {
          // In one tick, so that they travel in one batch with the stuck key; then a crowd on the
          // stuck key, and other users after it.
          const first = [limiter.tryAcquire('stuck'), limiter.tryAcquire('a'), limiter.tryAcquire('b'), limiter.tryAcquire('c')];
          const crowd = Array.from({ length: 50 }, () => limiter.tryAcquire('stuck'));
          const users = Array.from({ length: 30 }, (_, i) => limiter.tryAcquire(`user-${i}`));
          const [stuck, ...others] = await Promise.all(first);
          for (const decision of [...others, ...(await Promise.all(users))]) expect(decision).toStrictEqual({ allowed: true, limit: 2, remaining: 1, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
          // Under 'allow' the stuck key is let through, marked: the policy answered, at its timeout.
          expect(stuck).toMatchObject({ allowed: true, degraded: 'store-timeout' });
          for (const decision of await Promise.all(crowd)) expect(decision.degraded).toBe('store-timeout');
          expect(errors.length).toBeGreaterThanOrEqual(51);
          // The stuck statement stopped waiting on the server (lock_timeout follows timeoutMs), while the row is still held.
          expect(await stuckStatements(admin, schema)).toBe(0);
        } finally {
          await held.release();
        }
        // None of the stuck key's calls ran late: the row holds the one permit spent before.
        expect(await limiter.peek('stuck', 0)).toMatchObject({ remaining: 1 });
        expect(await limiter.tryAcquire('stuck')).toStrictEqual({ allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
      } finally {
        await end();
      }
    },
  );
});
