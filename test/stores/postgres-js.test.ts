import postgres from 'postgres';
import { storeConformance } from './conformance';
import { connection, openPostgres, postgresPort } from './support/postgres-store';
import { PostgresRateLimiter } from '../../src/postgres';

storeConformance({
  name: 'PostgreSQL via postgres.js',
  needs: 'postgresql-15',
  available: postgresPort !== 0,
  limiterClass: PostgresRateLimiter,
  open: () =>
    openPostgres('postgresjs', (port) => {
      const client = postgres({ ...connection(port), max: 8, onnotice: () => {} });
      return { client, close: () => client.end({ timeout: 1 }) };
    }),
});
