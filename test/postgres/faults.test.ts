// PostgreSQL faults, for real, on a server of this file's own: stopped, restarted, and a decision
// stuck behind a row lock (a slow query). Throughout, each call is answered by the policy (marked
// degraded; a store-timeout never before timeoutMs), none hangs, nothing is left unhandled, and the
// same limiter and pool recover in place.
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import { Rule } from '../../src/index';
import { migrate, type PostgresClientLike, PostgresRateLimiter, PostgresTimeoutError } from '../../src/postgres';
import { type PostgresServer, startPostgres } from '../stores/servers/postgres-server';
import { connection, postgresPort, stuckStatements } from '../stores/support/postgres-store';
import { HANG_MS } from '../support/hang';
import { recovered, timed } from '../support/recovery';

const TIMEOUT_MS = 200;

const unhandled: unknown[] = [];
const collect = (reason: unknown) => unhandled.push(reason);

describe.skipIf(!postgresPort)('PostgreSQL faults: the policy answers in time, and service resumes in place', { timeout: 30_000 }, () => {
  let server: PostgresServer;
  beforeAll(async () => {
    process.on('unhandledRejection', collect);
    server = await startPostgres();
  }, 30_000);
  afterEach(async () => {
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(unhandled).toEqual([]);
  });
  afterAll(async () => {
    process.off('unhandledRejection', collect);
    await server?.destroy();
  });

  test('stopped, then restarted on the same port: degraded meanwhile, exact again after, with pg and postgres.js', async () => {
    const pool = new pg.Pool({ ...connection(server.port), max: 4 });
    pool.on('error', () => {});
    const sql = postgres({ ...connection(server.port), max: 4, onnotice: () => {}, connect_timeout: 1 });
    const clients: PostgresClientLike[] = [pool, sql];
    try {
      await migrate(pool);
      const errors: unknown[] = [];
      const limiters = clients.map(
        (client, i) => new PostgresRateLimiter({ client, algorithm: 'fixed-window', rule: new Rule(3, 1e12), onStoreError: 'allow', timeoutMs: TIMEOUT_MS, prefix: `restart-${i}:`, onError: (error) => errors.push(error) }),
      );
      for (const limiter of limiters) expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 2 });
      await server.stop();
      for (const limiter of limiters) {
        const { decision, elapsed } = await timed(limiter, 'k');
        expect(decision).toMatchObject({ allowed: true, remaining: 2 });
        // A refused connection answers at once (store-error); a connection attempt left hanging is
        // cut by the limiter's timer, which never fires early (store-timeout).
        expect(['store-error', 'store-timeout']).toContain(decision.degraded);
        if (decision.degraded === 'store-timeout') expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
        expect(elapsed).toBeLessThan(HANG_MS);
      }
      expect(errors.length).toBeGreaterThanOrEqual(2);
      server = await server.restart();
      // The table is UNLOGGED: a clean shutdown keeps it, so each key goes on from where it was.
      for (const limiter of limiters) expect(await recovered(limiter, 'k', 10_000)).toStrictEqual({ allowed: true, limit: 3, remaining: 1, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
    } finally {
      await pool.end();
      await sql.end({ timeout: 1 });
    }
  });

  test('a slow query (the row locked by a long transaction): store-timeout within timeoutMs; the late decision is given up on the server, and service resumes', async () => {
    const pool = new pg.Pool({ ...connection(server.port), max: 4 });
    pool.on('error', () => {});
    const holder = new pg.Client(connection(server.port));
    await holder.connect();
    try {
      await migrate(pool);
      const errors: unknown[] = [];
      const limiter = new PostgresRateLimiter({ client: pool, algorithm: 'token-bucket', rule: new Rule(2, 1e12), onStoreError: 'deny', timeoutMs: TIMEOUT_MS, prefix: 'slow:', onError: (error) => errors.push(error) });
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
      await holder.query('BEGIN');
      await holder.query(`SELECT * FROM ratekeeper.ratekeeper_state WHERE key LIKE 'slow:%' FOR UPDATE`);
      const { decision, elapsed } = await timed(limiter, 'k');
      expect(decision).toMatchObject({ allowed: false, degraded: 'store-timeout' });
      expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
      expect(elapsed).toBeLessThan(HANG_MS);
      expect(errors).toEqual([expect.any(PostgresTimeoutError)]);
      expect(errors[0]).toMatchObject({ name: 'PostgresTimeoutError', code: 'ERR_RATEKEEPER_STORE_TIMEOUT', timeoutMs: TIMEOUT_MS });
      // The stuck decision gave up its wait on the server (lock_timeout follows timeoutMs): it never
      // runs late, and holds no connection meanwhile.
      expect(await stuckStatements(pool, 'ratekeeper')).toBe(0);
      await holder.query('COMMIT');
      expect(await recovered(limiter, 'k', 5_000)).toMatchObject({ allowed: true, remaining: 0 });
    } finally {
      await holder.end();
      await pool.end();
    }
  });

  test("a lock wait the server's lock_timeout ends before the limiter's own timer is a store-timeout too, with pg and postgres.js", async () => {
    const pool = new pg.Pool({ ...connection(server.port), max: 4 });
    pool.on('error', () => {});
    const sql = postgres({ ...connection(server.port), max: 4, onnotice: () => {} });
    const holder = new pg.Client(connection(server.port));
    await holder.connect();
    try {
      await migrate(pool);
      const clients: PostgresClientLike[] = [pool, sql];
      const errors: unknown[] = [];
      const limiters = clients.map(
        (client, i) => new PostgresRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(2, 1e12), onStoreError: 'deny', timeoutMs: TIMEOUT_MS, prefix: `lock-timeout-${i}:`, onError: (error) => errors.push(error) }),
      );
      for (const limiter of limiters) expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
      await holder.query('BEGIN');
      await holder.query(`SELECT * FROM ratekeeper.ratekeeper_state WHERE key LIKE 'lock-timeout-%' FOR UPDATE`);
      // The limiter's own timer never fires here: only the server's lock_timeout can end the wait.
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      try {
        for (const limiter of limiters) expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, degraded: 'store-timeout' });
      } finally {
        vi.useRealTimers();
      }
      expect(errors).toHaveLength(2);
      for (const error of errors) {
        expect(error).toBeInstanceOf(PostgresTimeoutError);
        expect(error).toMatchObject({ code: 'ERR_RATEKEEPER_STORE_TIMEOUT', timeoutMs: TIMEOUT_MS, cause: { code: '55P03' } });
      }
      await holder.query('COMMIT');
    } finally {
      await holder.end();
      await pool.end();
      await sql.end({ timeout: 1 });
    }
  });
});
