import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { migrate } from '../../../src/postgres';
import { connection, uniqueSchema } from '../../stores/support/postgres-store';

/**
 * A pool and a migrated schema of their own for the enclosing `describe`, dropped after it. Read
 * `pool` inside the tests: it is made before the first one.
 */
export function migratedSchema(name: string): { readonly pool: pg.Pool; readonly schema: string } {
  const made = { pool: undefined as unknown as pg.Pool, schema: uniqueSchema(name) };
  beforeAll(async () => {
    made.pool = new pg.Pool({ ...connection(), max: 2 });
    await migrate(made.pool, { schema: made.schema });
  });
  afterAll(async () => {
    await made.pool.query(`DROP SCHEMA IF EXISTS "${made.schema}" CASCADE`);
    await made.pool.end();
  });
  return made;
}
