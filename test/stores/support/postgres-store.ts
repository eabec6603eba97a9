import { inject } from 'vitest';
import { migrate, type PgClient, type PostgresClientLike, PostgresRateLimiter } from '../../../src/postgres';
import { freePort } from '../../redis/helpers/redis-server';
import type { OpenStore, StoreLimiterOptions } from '../conformance';

/** The port of the PostgreSQL cluster started for this run, or 0 when there is none (its suites skip). */
export const postgresPort = inject('postgresPort');

/** The port of the PgBouncer (transaction mode) in front of that cluster, or 0 when there is none (its suites skip). */
export const pgbouncerPort = inject('pgbouncerPort');

/** Connection settings for the run's cluster (or any port): trust authentication as `postgres`. */
export const connection = (port = postgresPort) => ({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres' });

/** A schema of its own for each test file, so that files wipe and count only their own rows. */
export function uniqueSchema(name: string): string {
  return `test_${name}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
}

/** One client of the store, as its adapter opens it. */
export interface PostgresTestClient {
  readonly client: PostgresClientLike;
  close(): Promise<void>;
}

/**
 * The {@link OpenStore} of PostgreSQL over one client library, in a schema of its own, reached on
 * `port` (the cluster's, or PgBouncer's in front of it).
 */
export async function openPostgres(name: string, connect: (port: number) => PostgresTestClient, port = postgresPort): Promise<OpenStore> {
  const schema = uniqueSchema(name);
  const main = connect(port);
  const opened = [main];
  await migrate(main.client, { schema });
  const admin = (sql: string) => run(main.client, sql);
  return {
    limiter: (options: StoreLimiterOptions) => new PostgresRateLimiter({ client: main.client, schema, ...options }),
    unreachable: (options: StoreLimiterOptions) => {
      let limiter: PostgresRateLimiter | undefined;
      const ready = freePort().then((port) => {
        const dead = connect(port);
        opened.push(dead);
        limiter = new PostgresRateLimiter({ client: dead.client, schema, ...options });
      });
      const built = async () => limiter ?? (await ready, limiter!);
      return { tryAcquire: async (key, permits) => (await built()).tryAcquire(key, permits), peek: async (key: string, permits?: number) => (await built()).peek(key, permits) };
    },
    wipe: async (prefix) => {
      await admin(`DELETE FROM "${schema}".ratekeeper_state WHERE starts_with(key, '${prefix.replaceAll("'", "''")}')`);
    },
    close: async () => {
      await admin(`DROP SCHEMA "${schema}" CASCADE`);
      await Promise.all(opened.map((client) => client.close()));
    },
  };
}

/**
 * Resolves once no session runs a statement naming `schema` while waiting for another transaction
 * (a decision stuck behind a held row gave up, by its lock_timeout), or after `ms`; with how many
 * still wait.
 */
export async function stuckStatements(admin: PgClient, schema: string, ms = 15_000): Promise<number> {
  const started = performance.now();
  for (;;) {
    const { rows } = await admin.query(
      `SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'
         AND pid IN (SELECT pid FROM pg_stat_activity WHERE strpos(query, $1) > 0 AND pid <> pg_backend_pid())`,
      [schema],
    );
    const waiting = Number((rows[0] as { n: string }).n);
    if (waiting === 0 || performance.now() - started > ms) return waiting;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Runs a statement on either client library. */
function run(client: PostgresClientLike, sql: string): Promise<unknown> {
  return 'unsafe' in client ? Promise.resolve(client.unsafe(sql)) : client.query(sql);
}
