import postgres from 'postgres';
import { storeConformance } from './conformance';
import { connection, openPostgres, postgresPort } from './support/postgres-store';

storeConformance({
  name: 'PostgreSQL via postgres.js',
  needs: 'postgresql-15',
  available: postgresPort !== 0,
  open: () =>
    openPostgres('postgresjs', (port) => {
      const client = postgres({ ...connection(port), max: 8, onnotice: () => {} });
      return { client, close: () => client.end({ timeout: 1 }) };
    }),
});
