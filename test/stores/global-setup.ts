import type { TestProject } from 'vitest/node';
import { startRedisServer } from '../redis/helpers/redis-server';
import { startPgBouncer } from './servers/pgbouncer-server';
import { startPostgres } from './servers/postgres-server';
import { missingMessage, needed, type ServerName, servers } from './servers/servers';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The port of the valkey-server started for this run, or 0 when there is none (its suites skip). */
    valkeyPort: number;
    /** The port of the PostgreSQL cluster created for this run, or 0 when there is none (its suites skip). */
    postgresPort: number;
    /** The port of a PgBouncer in transaction mode in front of that cluster, or 0 when there is none (its suites skip). */
    pgbouncerPort: number;
  }
}

/**
 * Starts one valkey-server and one PostgreSQL cluster for the whole run, each on a free loopback
 * port, and a PgBouncer in transaction mode in front of the cluster; each test file keeps to its
 * own keys (or its own schema). A missing server skips the suites that need it, or fails the run
 * on CI.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const missing = servers.filter((server) => !server.present()).map((server) => server.name);
  if (process.env.CI === 'true' && missing.length > 0) throw new Error(missing.map((name) => missingMessage(name as ServerName)).join('\n'));
  const [valkey, postgres] = await Promise.all([
    missing.includes('valkey-server') || !needed(project, 'valkey-server') ? undefined : startRedisServer({ binary: 'valkey-server' }),
    missing.includes('postgresql-15') || !needed(project, 'postgresql-15') ? undefined : startPostgres(),
  ]);
  const pgbouncer = postgres === undefined || missing.includes('pgbouncer') || !needed(project, 'pgbouncer') ? undefined : await startPgBouncer(postgres.port);
  project.provide('valkeyPort', valkey?.port ?? 0);
  project.provide('postgresPort', postgres?.port ?? 0);
  project.provide('pgbouncerPort', pgbouncer?.port ?? 0);
  return async () => {
    await pgbouncer?.destroy();
    await Promise.all([valkey?.stop(), postgres?.destroy()]);
  };
}
