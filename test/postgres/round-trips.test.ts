// What src/postgres/client.ts sends per decision: one round trip with either client library (a
// loopback proxy in front of the server counts the client's turns to speak), and, with postgres.js,
// whose values travel as literals in the statement's text, every key reaching its row intact.
import { createServer, type Server, type Socket, connect } from 'node:net';
import { fc, test } from '@fast-check/vitest';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { Rule } from '../../src/index';
import { migrate, PostgresRateLimiter } from '../../src/postgres';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

/** A proxy to the run's server that counts the client's turns: each time it speaks after the server has. */
async function turnCounter(): Promise<{ port: number; turns: () => number; close(): Promise<void> }> {
  let turns = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(postgresPort, '127.0.0.1');
    let serverSpoke = false;
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {});
    }
    client.on('data', (chunk) => {
      if (serverSpoke) turns++;
      serverSpoke = false;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      serverSpoke = true;
      client.write(chunk);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    turns: () => turns,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe.skipIf(!postgresPort)('what a decision sends', () => {
  const schema = uniqueSchema('trips');
  let admin: pg.Pool;
  let sql: postgres.Sql;
  beforeAll(async () => {
    admin = new pg.Pool({ ...connection(), max: 2 });
    sql = postgres({ ...connection(), max: 1, onnotice: () => {} });
    await migrate(admin, { schema });
  });
  afterAll(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await Promise.all([admin.end(), sql.end()]);
  });

  test.each(['pg', 'postgres.js'])('one round trip a decision, alone or batched, with %s', async (library) => {
    const proxy = await turnCounter();
    const settings = { ...connection(proxy.port) };
    const client = library === 'pg' ? new pg.Pool({ ...settings, max: 1 }) : postgres({ ...settings, max: 1, onnotice: () => {} });
    try {
      // Keys of its own: the other library's test leaves 'a' refilling, a token every 10 ms.
      const limiter = new PostgresRateLimiter({ client, schema, prefix: `${library}:`, algorithm: 'token-bucket', rule: Rule.perSecond(100), onStoreError: 'deny', timeoutMs: 5_000 });
      // The connection's own start (and postgres.js's type lookup) is not counted.
      expect(await limiter.tryAcquire('warm')).toMatchObject({ allowed: true });
      const before = proxy.turns();
      for (let i = 0; i < 5; i++) expect(await limiter.tryAcquire(`alone-${i}`)).toMatchObject({ allowed: true });
      const batched = await Promise.all(['a', 'b', 'c', 'a'].map((key) => limiter.tryAcquire(key)));
      expect(batched.map((decision) => decision.remaining)).toEqual([99, 99, 99, 98]);
      // Five calls alone, then one batch of four.
      expect(proxy.turns() - before).toBe(6);
    } finally {
      await ('end' in client && typeof client.end === 'function' ? client.end() : undefined);
      await proxy.close();
    }
  });

  test.prop([fc.string({ unit: 'grapheme', maxLength: 40 }).filter((key) => !key.includes('\u0000'))], { numRuns: 60 })(
    'any key reaches its row as written, through postgres.js (values as literals: quotes, backslashes, dollars, any text)',
    async (key) => {
      const prefix = `lit-${Math.random()}:`;
      const limiter = new PostgresRateLimiter({ client: sql, schema, prefix, algorithm: 'fixed-window', rule: Rule.perMinute(5), onStoreError: 'deny' });
      expect(await limiter.tryAcquire(`${key}\\'$1`, 2)).toMatchObject({ allowed: true, remaining: 3 });
      const { rows } = await admin.query(`SELECT key FROM "${schema}".ratekeeper_state WHERE starts_with(key, $1)`, [prefix]);
      expect(rows).toEqual([{ key: `${prefix}fixed-window:${key}\\'$1` }]);
    },
  );

  test('a schema whose name holds `$1` and `"` keeps it, through postgres.js (a value is never written inside the quoted name)', async () => {
    const dollars = `${schema}$1"$2`;
    await migrate(admin, { schema: dollars });
    try {
      const limiter = new PostgresRateLimiter({ client: sql, schema: dollars, algorithm: 'fixed-window', rule: Rule.perMinute(5), onStoreError: 'deny' });
      const key = `") AS r; DROP TABLE x; --`;
      expect(await limiter.tryAcquire(key)).toMatchObject({ allowed: true, remaining: 4 });
      expect(await Promise.all([limiter.tryAcquire(key), limiter.tryAcquire('other')])).toMatchObject([{ remaining: 3 }, { remaining: 4 }]);
      // Through ratekeeper_decide too; a peek of 1 permit answers what would remain after it.
      expect(await limiter.peek(key)).toMatchObject({ allowed: true, remaining: 2 });
      const { rows } = await admin.query(`SELECT key FROM "${dollars.replaceAll('"', '""')}".ratekeeper_state ORDER BY key`);
      expect(rows.map((row) => row.key)).toEqual([`ratekeeper:fixed-window:${key}`, 'ratekeeper:fixed-window:other']);
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${dollars.replaceAll('"', '""')}" CASCADE`);
    }
  });

  test('long keys of quotes and backslashes, and caller clocks of any finite size, decide alike through both clients', async () => {
    const readings = [1e21, 2 ** 53 + 2, 0.1 + 0.2, 1.5e-7, 5e-324, -0, 123_456.75];
    const answers = await Promise.all(
      [admin, sql].map(async (client, i) => {
        let reading = 0;
        const limiter = new PostgresRateLimiter({ client, schema, prefix: `long-${i}-${Math.random()}:`, clock: { now: () => reading }, algorithm: 'sliding-window-counter', rule: Rule.perMinute(3), onStoreError: 'deny' });
        const decisions = [];
        for (const [j, now] of readings.entries()) {
          reading = now;
          decisions.push(await limiter.tryAcquire(`'\\$1${"'\\".repeat(500 + j)}`));
        }
        return decisions;
      }),
    );
    expect(answers[0]!.every((decision) => decision.degraded === undefined)).toBe(true);
    expect(answers[1]).toEqual(answers[0]);
  });
});
