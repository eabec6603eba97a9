import pg from 'pg';
import { storeConformance } from './conformance';
import { connection, openPostgres, pgbouncerPort } from './support/postgres-store';

// Through PgBouncer in transaction mode: each statement may run on another server connection.
storeConformance({
  name: 'PostgreSQL via pg (Pool) through PgBouncer (transaction mode)',
  needs: 'pgbouncer',
  available: pgbouncerPort !== 0,
  open: () =>
    openPostgres(
      'bouncer_pg',
      (port) => {
        const client = new pg.Pool({ ...connection(port), max: 8 });
        client.on('error', () => {});
        return { client, close: () => client.end() };
      },
      pgbouncerPort,
    ),
});
