// What PostgresRateLimiter gained from the store layer (src/store): `name` keeps limits with the same
// prefix, algorithm and rule apart (and shares them on purpose), the overlap warning, rules chosen
// per key by a function, and the refusal cache.
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { migrate, PostgresRateLimiter } from '../../src/postgres';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { uniquePrefix } from '../redis/helpers/clients';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

describe.skipIf(!postgresPort)('PostgresRateLimiter: name, rules per key', () => {
  const schema = uniqueSchema('name_rules');
  let pool: pg.Pool;
  beforeAll(async () => {
    pool = new pg.Pool({ ...connection(), max: 4 });
    await migrate(pool, { schema });
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    await pool.end();
  });
  afterEach(() => vi.restoreAllMocks());

  const rows = async (prefix: string) => (await pool.query(`SELECT key FROM "${schema}".ratekeeper_state WHERE starts_with(key, $1) ORDER BY key`, [prefix])).rows.map((row: { key: string }) => row.key);

  test('limiters with the same prefix, algorithm and rule keep their own counts under different names, and share them under one', async () => {
    const prefix = uniquePrefix('pg-name');
    const options = { client: pool, schema, algorithm: 'fixed-window', rule: Rule.perMinute(1), onStoreError: 'deny', prefix } as const;
    const login = new PostgresRateLimiter({ ...options, name: 'login' });
    const search = new PostgresRateLimiter({ ...options, name: 'search' });
    const otherServer = new PostgresRateLimiter({ ...options, name: 'login' });
    expect(await login.tryAcquire('alice')).toMatchObject({ allowed: true });
    expect(await search.tryAcquire('alice')).toMatchObject({ allowed: true });
    expect(await otherServer.tryAcquire('alice')).toMatchObject({ allowed: false });
    expect(await rows(prefix)).toEqual([`${prefix}login:fixed-window:alice`, `${prefix}search:fixed-window:alice`]);
    expect(login.toJSON()).toEqual({ algorithm: 'fixed-window', rule: { limit: 1, windowMs: 60_000 }, schema, prefix, name: 'login', timeoutMs: 500 });
  });

  test('a name is checked: a non-empty string without U+0000 or a lone surrogate', () => {
    const options = { client: pool, schema, algorithm: 'fixed-window', rule: Rule.perMinute(1), onStoreError: 'deny' } as const;
    expect(() => new PostgresRateLimiter({ ...options, name: '' })).toThrow(TypeError);
    expect(() => new PostgresRateLimiter({ ...options, name: 'a\u0000b' })).toThrow('ratekeeper: `name` must be a string without U+0000, got "a\\u0000b"');
    expect(() => new PostgresRateLimiter({ ...options, name: 'a\uD800' })).toThrow(TypeError);
    expect(() => new PostgresRateLimiter({ ...options, name: 42 as never })).toThrow(TypeError);
  });

  test('two limiters on one client whose keys meet without a name are reported once; other schemas and named limiters are not', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const prefix = uniquePrefix('pg-overlap');
    const options = { client: pool, algorithm: 'token-bucket', rule: Rule.perMinute(5), onStoreError: 'deny', prefix } as const;
    new PostgresRateLimiter({ ...options, schema });
    new PostgresRateLimiter({ ...options, schema: `${schema}_other` });
    new PostgresRateLimiter({ ...options, schema, name: 'a' });
    new PostgresRateLimiter({ ...options, schema, name: 'b' });
    expect(warn).not.toHaveBeenCalled();
    new PostgresRateLimiter({ ...options, schema });
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toMatch(/^ratekeeper: two PostgresRateLimiters on one client count under /);
  });

  test('two limiters with different rules and no name are reported too: a row key no longer holds the rule, so they share each key', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const options = { client: pool, schema, algorithm: 'token-bucket', onStoreError: 'deny', prefix: uniquePrefix('pg-rules') } as const;
    new PostgresRateLimiter({ ...options, rule: Rule.perMinute(5) });
    new PostgresRateLimiter({ ...options, rule: Rule.perHour(100), name: 'hourly' });
    expect(warn).not.toHaveBeenCalled();
    new PostgresRateLimiter({ ...options, rule: Rule.perHour(100) });
    expect(warn).toHaveBeenCalledTimes(1);
  });

  for (const algorithm of algorithmNames) {
    test(`${algorithm}: an async rule function decides each key as the in-memory twin of its own rule`, async () => {
      const clock = new ManualClock(5_000_000);
      const ruleOf = (key: string) => (key.startsWith('pro') ? new Rule(4, 3_600_000) : new Rule(2, 60_000));
      const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm, rule: async (key: string) => ruleOf(key), onStoreError: 'deny', clock, prefix: uniquePrefix('pg-rules') });
      const twin = new KeyedRateLimiter({ algorithm: (key) => new twins[algorithm](ruleOf(key)), clock });
      for (let step = 0; step < 15; step++) {
        const key = ['free-a', 'pro-b', 'free-c'][step % 3]!;
        clock.advance(step % 4 === 0 ? 9_000 : 0);
        expect(await limiter.tryAcquire(key), `step ${step} ${key}`).toEqual(twin.tryAcquire(key));
      }
      // Calls of one tick on keys of different rules share a round trip, each under its own rule.
      const together = await Promise.all(['free-a', 'pro-b', 'free-c', 'pro-d'].map((key) => limiter.peek(key, 0)));
      expect(together).toEqual(['free-a', 'pro-b', 'free-c', 'pro-d'].map((key) => twin.peek(key, 0)));
      const batch = await Promise.all(['free-x', 'pro-y', 'free-z'].map((key) => limiter.tryAcquire(key)));
      expect(batch).toEqual(['free-x', 'pro-y', 'free-z'].map((key) => twin.tryAcquire(key)));
    });
  }

  test('a rule function that throws rejects with what it threw; a lookup past timeoutMs rejects an operation with a PostgresTimeoutError', async () => {
    const thrown = new Error('no plan');
    const failing = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule: () => { throw thrown; }, onStoreError: 'allow', prefix: uniquePrefix('pg-throws') });
    await expect(failing.tryAcquire('k')).rejects.toBe(thrown);
    const slow = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule: () => new Promise<Rule>(() => {}), onStoreError: 'deny', timeoutMs: 30, prefix: uniquePrefix('pg-slow') });
    expect(await slow.tryAcquire('k')).toMatchObject({ allowed: false, limit: 1, retryAfterMs: 30, degraded: 'store-timeout' });
    await expect(slow.reset('k')).rejects.toMatchObject({ name: 'PostgresTimeoutError', code: 'ERR_RATEKEEPER_STORE_TIMEOUT', message: 'ratekeeper: the rule function did not answer within 30 ms' });
  });

  test('refusalCache: a refused key is answered locally until its retry time', async () => {
    const clock = new ManualClock(0);
    const query = vi.spyOn(pool, 'query');
    const limiter = new PostgresRateLimiter({ client: pool, schema, algorithm: 'fixed-window', rule: Rule.perMinute(1), onStoreError: 'deny', clock, refusalCache: true, prefix: uniquePrefix('pg-refusals') });
    await limiter.tryAcquire('k');
    const refused = await limiter.tryAcquire('k');
    const sent = query.mock.calls.length;
    clock.advance(100);
    expect(await limiter.tryAcquire('k')).toEqual({ ...refused, retryAfterMs: refused.retryAfterMs - 100, resetAfterMs: refused.resetAfterMs - 100 });
    expect(query.mock.calls.length).toBe(sent);
  });
});
