import pg from 'pg';
import { storeConformance } from './conformance';
import { connection, openPostgres, postgresPort } from './support/postgres-store';

storeConformance({
  name: 'PostgreSQL via pg (Pool)',
  needs: 'postgresql-15',
  available: postgresPort !== 0,
  open: () =>
    openPostgres('pg', (port) => {
      const client = new pg.Pool({ ...connection(port), max: 8 });
      client.on('error', () => {});
      return { client, close: () => client.end() };
    }),
});
