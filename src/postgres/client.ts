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
    return (text, values) => Promise.resolve(sql.unsafe(text, values, { prepare: false }));
  }
  if (typeof c.query === 'function') {
    const pg = client as { query(text: string, values: readonly unknown[]): Promise<{ rows: unknown[] }> };
    return (text, values) => pg.query(text, values).then((result) => result.rows);
  }
  throw typeError(`ratekeeper: \`client\` must be a pg Pool or Client, or a postgres.js sql, got ${describe(client)}`);
}
