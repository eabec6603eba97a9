import { rangeError, typeError } from '../core/errors';
import { describe } from '../core/validate';
import { literal, toQuery, type PostgresClientLike } from './client';
import { migration, stampedFunction } from './sql/schema';

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
 * On a schema already up to date it reads the catalog and changes and locks nothing. A table made
 * by an earlier version gets only what it lacks, never rewritten; such a change waits for the
 * table's lock at most 2 s (a long reader holding it, say), then rejects: run it again. Any schema
 * name of 1 to 63 characters without U+0000 works, `$$` and quotes included.
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
  const schema = quotedSchema(options?.schema);
  const text = migration(schema, literal);
  // The function made last carries the digest of the migration that made it: equal, and the table
  // still there, everything this migration makes is there, so nothing is sent that would lock or
  // change anything.
  const [row] = await query(
    `SELECT 'ratekeeper ' || encode(sha256(convert_to($1, 'UTF8')), 'hex') AS stamp,
       CASE WHEN to_regclass($3) IS NOT NULL THEN obj_description(to_regprocedure($2), 'pg_proc') END AS found`,
    [text, stampedFunction(schema), `${schema}.ratekeeper_state`],
  );
  const { stamp, found } = row as { stamp: string; found: string | null };
  if (found === stamp) return;
  await query(`${text}\nCOMMENT ON FUNCTION ${stampedFunction(schema)} IS ${literal(stamp)};`, []);
}

/** The schema name as a quoted SQL identifier, after checking it. */
export function quotedSchema(schema: unknown = 'ratekeeper'): string {
  if (typeof schema !== 'string') throw typeError(`ratekeeper: \`schema\` must be a string, got ${describe(schema)}`);
  if (schema.length === 0 || schema.length > 63 || schema.includes('\u0000')) {
    throw rangeError(`ratekeeper: \`schema\` must be a PostgreSQL identifier of 1 to 63 characters without NUL, got ${describe(schema)}`);
  }
  return `"${schema.replaceAll('"', '""')}"`;
}
