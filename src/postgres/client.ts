import { typeError } from '../core/errors';
import { describe } from '../core/validate';

/**
 * A `pg` `Pool` or `Client` (or anything with its `query(text, values)` returning `{ rows }`).
 * Queries go without a name, so no prepared statement outlives them: safe behind PgBouncer in
 * transaction mode.
 */
export interface PgClient {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * A postgres.js `sql` (or anything with its `unsafe(text, values, options)` returning rows).
 * Queries are sent with `prepare: false`: no named prepared statement, safe behind PgBouncer.
 */
export interface PostgresJsClient {
  unsafe(text: string, values?: never[], options?: { prepare?: boolean }): PromiseLike<readonly unknown[]>;
}

/**
 * What `client` may be: a `pg` Pool or Client, or a postgres.js `sql`. ratekeeper depends on
 * neither: it calls the one method each has.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import type { PostgresClientLike } from 'ratekeeper/postgres';
 * const client: PostgresClientLike = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * ```
 */
export type PostgresClientLike = PgClient | PostgresJsClient;

/** Runs one statement and resolves with its rows. */
export type Query = (text: string, values: readonly unknown[]) => Promise<readonly unknown[]>;

/** Brings either client to one `query` that resolves with rows, telling them apart by their methods. */
export function toQuery(client: unknown): Query {
  const c = (client !== null && (typeof client === 'object' || typeof client === 'function') ? client : {}) as Partial<Record<'unsafe' | 'query', unknown>>;
  // postgres.js's `sql` is a function with `unsafe`; pg's Pool and Client are objects with `query`.
  if (typeof c.unsafe === 'function') {
    const sql = client as { unsafe(text: string, values: readonly unknown[], options: { prepare: boolean }): PromiseLike<readonly unknown[]> };
    // Given parameters and no statement to prepare, postgres.js first asks the server for their
    // types (Parse and Describe), then binds them: two round trips a call. Written into the text as
    // literals, the values go in one, still without a prepared statement.
    return (text, values) => Promise.resolve(sql.unsafe(values.length === 0 ? text : withLiterals(text, values), [], { prepare: false }));
  }
  if (typeof c.query === 'function') {
    const pg = client as { query(text: string, values: readonly unknown[]): Promise<{ rows: unknown[] }> };
    return (text, values) => pg.query(text, values).then((result) => result.rows);
  }
  throw typeError(`ratekeeper: \`client\` must be a pg Pool or Client, or a postgres.js sql, got ${describe(client)}`);
}

/**
 * `text` with each `$n` replaced by the n-th value as an SQL literal, quoted so that the statement's
 * own cast (`$1::text`, `$2::numeric`) types it: a string as an escape string (`E'...'`, quotes and
 * backslashes doubled, so it reads the same whatever `standard_conforming_strings` says), a number
 * as its decimal text, null as NULL. For ratekeeper's own statements, whose only `$` outside quoted
 * identifiers are their parameters: a quoted identifier (the schema, which may hold `$1`) is kept
 * as it is, else a value would land inside it, where a `"` in a key would end it.
 */
function withLiterals(text: string, values: readonly unknown[]): string {
  return text.replace(/"(?:[^"]|"")*"|\$(\d+)/g, (match, n: string | undefined) => (n === undefined ? match : literal(values[Number(n) - 1])));
}

/** `value` as an SQL literal: a string as an escape string, a number as its decimal text, null as NULL. */
export function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'number' && Number.isFinite(value)) return `'${value}'`;
  if (typeof value === 'string') return `E'${value.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
  throw typeError(`ratekeeper: cannot send ${describe(value)} to PostgreSQL`);
}
