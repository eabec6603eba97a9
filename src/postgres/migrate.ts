import { rangeError, typeError } from '../core/errors';
import { describe } from '../core/validate';
import { toQuery, type PostgresClientLike } from './client';
import { migration } from './sql/schema';

/** Options of {@link migrate} and the schema option of `PostgresRateLimiter`. */
export interface MigrateOptions {
  /**
   * The schema that holds ratekeeper's table and functions; created when missing.
   * @default 'ratekeeper'
   */
  schema?: string | undefined;
}

/**
 * Creates, or brings up to date, the table and functions `PostgresRateLimiter` uses, in `schema`.
 * Idempotent and safe to run from several servers at once (they take turns on an advisory lock);
 * never run implicitly: call it at deploy time, or once at start-up, with a role allowed to create.
 * The table is UNLOGGED: fast, not replicated, emptied by a crash (every key starts over).
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { migrate } from 'ratekeeper/postgres';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool); // or migrate(pool, { schema: 'limits' })
 * ```
 */
export async function migrate(client: PostgresClientLike, options: MigrateOptions = {}): Promise<void> {
  const query = toQuery(client);
  await query(migration(quotedSchema(options?.schema)), []);
}

/** The schema name as a quoted SQL identifier, after checking it. */
export function quotedSchema(schema: unknown = 'ratekeeper'): string {
  if (typeof schema !== 'string') throw typeError(`ratekeeper: \`schema\` must be a string, got ${describe(schema)}`);
  if (schema.length === 0 || schema.length > 63 || schema.includes('\u0000')) {
    throw rangeError(`ratekeeper: \`schema\` must be a PostgreSQL identifier of 1 to 63 characters without NUL, got ${describe(schema)}`);
  }
  return `"${schema.replaceAll('"', '""')}"`;
}
