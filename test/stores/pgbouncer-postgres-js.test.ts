import postgres from 'postgres';
import { storeConformance } from './conformance';
import { connection, openPostgres, pgbouncerPort } from './support/postgres-store';

// Through PgBouncer in transaction mode, set up as docs/stores.md advises: `fetch_types: false`
// (postgres.js would otherwise prepare its type lookup by name on each connection) and nothing
// prepared (ratekeeper sends `prepare: false` itself).
storeConformance({
  name: 'PostgreSQL via postgres.js through PgBouncer (transaction mode), fetch_types off',
  needs: 'pgbouncer',
  available: pgbouncerPort !== 0,
  open: () =>
    openPostgres(
      'bouncer_postgresjs',
      (port) => {
        const client = postgres({ ...connection(port), max: 8, fetch_types: false, prepare: false, onnotice: () => {} });
        return { client, close: () => client.end({ timeout: 1 }) };
      },
      pgbouncerPort,
    ),
});
