// Issue 25 over PostgreSQL (DESIGN-25 S4): in-flight limits across processes, a killed holder, a
// held row, and what the row keeps. The twin equality is in-flight.property.test.ts (through the
// limiter) and leases.property.test.ts (the SQL alone).
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, test } from 'vitest';
import { Concurrency, ManualClock, Rule } from '../../src/index';
import { PostgresRateLimiter } from '../../src/postgres';
import { allCodecs } from '../../src/postgres/plans';
import { statements } from '../../src/postgres/protocol';
import { codecShell } from '../../src/postgres/sql/shell';
import { connection, postgresPort, stuckStatements } from '../stores/support/postgres-store';
import { chargedAhead, extendedAhead, type MakeLimiter } from '../support/clocks-ahead';
import { blockProvesTheWait, type CountedLimiter, onlyInFlightWaits, rateProvesTheWait } from '../support/lease-proven-wait';
import { nextMessage, raceFour, startRacer } from '../support/lease-race';
import { migratedSchema } from './helpers/schema';

const racer = fileURLToPath(new URL('./fixtures/lease-racer.ts', import.meta.url));

describe.skipIf(!postgresPort)('in-flight limits over PostgreSQL', () => {
  const made = migratedSchema('in-flight-pg');
  const serverMs = async () => Number((await made.pool.query('SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::text AS ms')).rows[0].ms);
  const limiterOf = (options: { prefix?: string; clock?: ManualClock; concurrency?: Concurrency; rule?: Rule; timeoutMs?: number } = {}) =>
    new PostgresRateLimiter({
      client: made.pool,
      schema: made.schema,
      algorithm: 'fixed-window',
      rule: options.rule ?? Rule.perMinute(100),
      concurrency: options.concurrency ?? new Concurrency(2, { leaseMs: 30_000 }),
      onStoreError: 'deny',
      prefix: options.prefix ?? `${Math.random()}:`,
      timeoutMs: options.timeoutMs ?? 5_000,
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    });

  test('four processes leasing one key, each with its own pg client, never hold more than the limit together', { timeout: 90_000 }, async () => {
    const limit = 3;
    const tasks = 25;
    const prefix = `race-${Math.random()}:`;
    await made.pool.query(`CREATE TABLE IF NOT EXISTS "${made.schema}".held (k text PRIMARY KEY, n int NOT NULL)`);
    await made.pool.query(`INSERT INTO "${made.schema}".held VALUES ($1, 0)`, [prefix]);
    const reports = await raceFour(racer, [String(postgresPort), made.schema, prefix, String(limit), '30000', String(tasks)]);
    // Every task was granted in turn, and at no moment did more than `limit` count themselves in.
    expect(reports.map((report) => report.granted)).toEqual([tasks, tasks, tasks, tasks]);
    expect(Math.max(...reports.map((report) => report.most))).toBeLessThanOrEqual(limit);
    expect(Math.max(...reports.map((report) => report.most))).toBeGreaterThan(0);
  });

  test("a SIGKILLed holder's permit comes back when its lease ends, by the server's clock", { timeout: 30_000 }, async () => {
    const leaseMs = 1500;
    const prefix = `kill-${Math.random()}:`;
    const holder = startRacer(racer, [String(postgresPort), made.schema, prefix, '1', String(leaseMs), '1']);
    let report: { granted: boolean; serverMs: number };
    try {
      await nextMessage(holder);
      const held = nextMessage(holder);
      holder.send('hold');
      report = (await held) as { granted: boolean; serverMs: number };
    } finally {
      holder.kill('SIGKILL');
    }
    const { granted, serverMs: grantedBy } = report;
    expect(granted).toBe(true);
    const limiter = new PostgresRateLimiter({
      client: made.pool,
      schema: made.schema,
      algorithm: 'token-bucket',
      rule: new Rule(1_000_000, 1000),
      concurrency: new Concurrency(1, { leaseMs }),
      onStoreError: 'deny',
      prefix,
      timeoutMs: 10_000,
    });
    // Still held by the dead process: refused, with the lease's end as the retry's bound.
    const refused = await limiter.reserve('shared');
    expect(refused.decision.allowed).toBe(false);
    expect(refused.decision.retryAfterMs).toBeLessThanOrEqual(leaseMs);
    const lease = await limiter.lease('shared', 1, { maxWaitMs: 20_000 });
    const now = await serverMs();
    expect(lease.decision.allowed).toBe(true);
    // Granted only once the lease had ended (it ended at most leaseMs after grantedBy), and soon
    // after: within the re-check of 100 ms, with room for a loaded machine's round trips.
    expect(now).toBeGreaterThanOrEqual(grantedBy - 1000 + leaseMs);
    expect(now - grantedBy).toBeLessThanOrEqual(leaseMs + 2000);
    await lease.settle(1);
  });

  test('a row another transaction holds: a lease answers by the outage policy at its timeout, and its statement gives up the wait on the server', { timeout: 30_000 }, async () => {
    const prefix = `stuck-${Math.random()}:`;
    const limiter = limiterOf({ prefix, timeoutMs: 500 });
    const first = await limiter.lease('k');
    expect(first.decision.allowed).toBe(true);
    const holder = new pg.Client(connection());
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const { rows } = await holder.query(`SELECT key FROM "${made.schema}".ratekeeper_state WHERE key = $1 FOR UPDATE`, [`${prefix}fixed-window:k`]);
      expect(rows).toHaveLength(1);
      // Asked not to wait: one try, bounded by timeoutMs, answered by 'deny'.
      expect((await limiter.lease('k', 1, { maxWaitMs: 0 })).decision).toMatchObject({ allowed: false, degraded: 'store-timeout' });
      // Asked to wait: it tries again (the row may come free) until maxWaitMs, then answers the same way.
      expect((await limiter.lease('k', 1, { maxWaitMs: 1_000 })).decision).toMatchObject({ allowed: false, degraded: 'store-timeout' });
      // No statement of ours is left waiting for the row (lock_timeout ended each).
      expect(await stuckStatements(made.pool, made.schema)).toBe(0);
    } finally {
      await holder.query('COMMIT');
      await holder.end();
    }
    // The holder gone, the held lease is still there and is released by its settle.
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 1, limit: 2 });
    await first.settle(1);
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 2, limit: 2 });
  });

  test("the row lives until the latest lease's end; an extension moves it later; a reset drops the leases", async () => {
    const prefix = `expiry-${Math.random()}:`;
    const clock = new ManualClock(0);
    // A rate that is as new again within a second: only the lease keeps the row.
    const limiter = limiterOf({ prefix, clock, rule: new Rule(100, 1_000), concurrency: new Concurrency(1, { leaseMs: 600_000 }) });
    const expiresIn = async () => Number((await made.pool.query(`SELECT expires_at::text AS e FROM "${made.schema}".ratekeeper_state WHERE key = $1`, [`${prefix}fixed-window:k`])).rows[0].e) - (await serverMs());
    const lease = await limiter.reserve('k');
    expect(lease.decision).toMatchObject({ allowed: true, remaining: 0, limit: 1, resetAfterMs: 600_000 });
    expect(await expiresIn()).toBeGreaterThan(590_000);
    expect(await (lease as unknown as { extend(ms: number): Promise<boolean> }).extend(2_000_000)).toBe(true);
    expect(await expiresIn()).toBeGreaterThan(1_990_000);
    await limiter.reset('k');
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 1, resetAfterMs: 0 });
    expect(await (lease as unknown as { extend(ms: number): Promise<boolean> }).extend(1_000)).toBe(false);
  });

  test('a rule change carries the leases over: each still held, released by its own settle', async () => {
    const prefix = `carry-${Math.random()}:`;
    const clock = new ManualClock(0);
    let rule = Rule.perMinute(10);
    const concurrency = new Concurrency(2, { leaseMs: 60_000 });
    const limiter = new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm: 'token-bucket', rule: () => rule, concurrency, onStoreError: 'deny', prefix, clock });
    const a = await limiter.reserve('k');
    const b = await limiter.reserve('k');
    expect((await limiter.reserve('k')).decision).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
    rule = Rule.perMinute(20);
    // Under the new rule the two leases are still held: the in-flight part binds.
    expect((await limiter.reserve('k')).decision).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
    await a.settle(1);
    expect(await limiter.peek('k', 0)).toMatchObject({ limit: 2, remaining: 1 });
    await b.cancel();
    expect(await limiter.peek('k', 0)).toMatchObject({ limit: 2, remaining: 2 });
  });

  describe('a waiting lease gives up at once when the rate or a block proves the wait longer than maxWaitMs, as in memory', () => {
    const make: CountedLimiter = (concurrency, clock, rule) => {
      let sent = 0;
      const counted = { query: (text: string, values?: unknown[]) => (sent++, made.pool.query(text, values)) };
      const rate = rule === undefined ? {} : { algorithm: 'token-bucket' as const, rule };
      return { limiter: new PostgresRateLimiter({ client: counted, schema: made.schema, ...rate, concurrency, onStoreError: 'deny', clock, prefix: `proven-${Math.random()}:`, timeoutMs: 5_000 }), sent: () => sent };
    };
    test('the rate proves it: refused after one statement, no re-check', () => rateProvesTheWait(make));
    test('a block proves it, on an in-flight limit alone', () => blockProvesTheWait(make));
    test('only the in-flight part refuses: the lease waits, re-checks, and is granted on the release', () => onlyInFlightWaits(make));
  });

  describe('a part whose clock is far ahead of the reading: answered as the in-memory Composite, in a bounded search (stepped up to 2^40 times before)', () => {
    const make: MakeLimiter = (rule, concurrency, clock) =>
      new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm: 'token-bucket', rule, concurrency, onStoreError: 'deny', clock, prefix: `ahead-${Math.random()}:`, timeoutMs: 10_000 });
    test('a lease extended at a later reading', () => extendedAhead(make, new ManualClock(0)));
    test('a settle charged at a later reading', () => chargedAhead(make, new ManualClock(0)));
  });

  test('a limiter without concurrency runs the functions it ran before: the plain functions never read the leases', () => {
    for (const codec of allCodecs) expect(codecShell('s', codec)).not.toMatch(/lease/);
    for (const text of Object.values(statements('s', 'token-bucket', 500))) expect(text).not.toMatch(/lease/);
  });

  test('the options: sliding-window-log takes concurrency too; tryAcquire, charge and acquire reject; toJSON shows it', async () => {
    const concurrency = new Concurrency(2, { leaseMs: 30_000 });
    const log = new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm: 'sliding-window-log', rule: Rule.perMinute(3), concurrency, onStoreError: 'deny', prefix: `log-${Math.random()}:` });
    const a = await log.reserve('k');
    await log.reserve('k');
    expect((await log.reserve('k')).decision).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
    await a.cancel();
    // The log gave back a's entry: 2 of 3 left there, 1 of 2 in flight (binding).
    expect((await log.reserve('k')).decision).toMatchObject({ allowed: true, limit: 2, remaining: 0 });
    const invalid = expect.objectContaining({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    await expect(log.tryAcquire('k')).rejects.toEqual(invalid);
    await expect(log.charge('k', 1)).rejects.toEqual(invalid);
    await expect(log.acquire('k')).rejects.toEqual(invalid);
    const alone = new PostgresRateLimiter({ client: made.pool, schema: made.schema, concurrency, onStoreError: 'deny', name: 'uploads' });
    expect(alone.concurrency).toBe(concurrency);
    expect(JSON.parse(JSON.stringify(alone))).toMatchObject({ algorithm: 'concurrency', name: 'uploads', schema: made.schema, concurrency: { limit: 2, leaseMs: 30_000 } });
    expect(() => new PostgresRateLimiter({ client: made.pool, concurrency: new Concurrency(2, { leaseMs: Infinity }), onStoreError: 'deny' })).toThrow(
      expect.objectContaining({ name: 'RangeError', message: expect.stringContaining('`concurrency.leaseMs`') }),
    );
  });

  test('an in-flight limit alone keeps its row under prefix + (name + ":")? + "concurrency:" + key', async () => {
    const prefix = `alone-${Math.random()}:`;
    const limiter = new PostgresRateLimiter({ client: made.pool, schema: made.schema, concurrency: new Concurrency(1), onStoreError: 'deny', prefix, name: 'jobs' });
    const lease = await limiter.lease('k');
    expect(lease.decision).toMatchObject({ allowed: true, limit: 1, remaining: 0 });
    const { rows } = await made.pool.query(`SELECT key, state FROM "${made.schema}".ratekeeper_state WHERE starts_with(key, $1)`, [prefix]);
    expect(rows).toEqual([{ key: `${prefix}jobs:concurrency:k`, state: null }]);
    await lease.settle(1);
  });
});
