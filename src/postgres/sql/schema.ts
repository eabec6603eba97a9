import { allCodecs } from '../plans';
import { tokenBucket } from './token-bucket';
import { dollarQuoted, QUOTE } from './dollar-quote';
import { leaseShells } from './leases';
import { codecShell, decideFunction } from './shell';

/** How long `migrate` waits for the table's lock when the table needs a change, in ms. */
export const MIGRATE_LOCK_TIMEOUT_MS = 2_000;

/** The columns versions after the first added: a new table is made with them, an earlier one gets those it lacks. */
const ADDED_COLUMNS = ['blocked_until numeric', 'rule_limit numeric', 'rule_window_ms numeric', 'receipts numeric[]', 'leases numeric[]'];

/**
 * The table: one row per key, the algorithm's state as `numeric[]` (see ./codec.ts; null or empty in
 * a row kept only for its block, read by every codec as a key never seen) and the moment, on the
 * database server's clock in ms, from which the row is as good as absent: when its key is as new
 * (its debt repaid, its block over), plus a slack of a quarter window (at most a minute,
 * `expirySlackMs`), so a caller's clock that lags the server's can never see its key forgotten
 * early. Beside the state, in columns of their own so that no codec touches them:
 * `blocked_until`, when the key's block ends (on the clock the limiter decides by: the server's,
 * or the caller's readings; null when never blocked); `rule_limit` and `rule_window_ms`, the rule
 * the state is counted under (a call under another rule carries the usage over: ./shell.ts); and
 * `receipts`, the key's outstanding reservations, oldest first, two numbers each: the caller's
 * random id and what the codec marks (its window, its time, or a bucket's lowest deficit since).
 * `leases`, the in-flight leases of a limiter with `concurrency` (./leases.ts), null for the others.
 * A row without a rule was written by the previous version, whose row keys held the rule.
 *
 * UNLOGGED: rate-limit state is worth less than the write-ahead log it would cost on every
 * decision; a crash empties the table (every key starts over, as after a Redis restart without
 * persistence) and replicas do not carry it. The index on `expires_at` lets a new row find
 * expired ones to reclaim without scanning the table. Expiries are kept on a one-second grid and
 * never moved earlier, so most grants leave `expires_at` as it was and, with pages half empty
 * (fillfactor 50), update the row in place (a HOT update: no index entry to write).
 *
 * A table made by an earlier version gets what it lacks, each change made only when the catalog
 * says it is needed, so that a table already up to date is neither locked nor changed: `ALTER
 * TABLE` and `CREATE INDEX ... IF NOT EXISTS` take the table's lock before they look, and would
 * queue every decision behind a reader holding it (pg_dump, a report). A change that is needed
 * waits for the lock at most `MIGRATE_LOCK_TIMEOUT_MS`, then fails (run `migrate` again), and none
 * rewrites the table: the new columns have no default, so PostgreSQL only records them. The
 * previous version's columns (`era`, `credited`) and functions stay: its processes keep deciding
 * with them, on its own row keys, until they stop (a rolling deploy).
 */
const TABLE = (schema: string, name: (relation: string) => string) => `
CREATE SCHEMA IF NOT EXISTS ${schema};

CREATE UNLOGGED TABLE IF NOT EXISTS ${schema}.ratekeeper_state (
  key text PRIMARY KEY,
  state numeric[],
  expires_at bigint NOT NULL,
  ${ADDED_COLUMNS.join(',\n  ')}
) WITH (fillfactor = 50);

DO ${QUOTE}
DECLARE
  t regclass := ${name('ratekeeper_state')}::regclass;
BEGIN
  PERFORM set_config('lock_timeout', '${MIGRATE_LOCK_TIMEOUT_MS}', true);
  IF NOT EXISTS (SELECT FROM pg_class WHERE oid = t AND reloptions @> '{fillfactor=50}') THEN
    ALTER TABLE ${schema}.ratekeeper_state SET (fillfactor = 50);
  END IF;
  IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = t AND attname = 'state' AND attnotnull) THEN
    ALTER TABLE ${schema}.ratekeeper_state ALTER COLUMN state DROP NOT NULL;
  END IF;
${ADDED_COLUMNS.map(
  (column) => `  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = t AND attname = '${column.split(' ')[0]}' AND NOT attisdropped) THEN
    ALTER TABLE ${schema}.ratekeeper_state ADD COLUMN ${column};
  END IF;`,
).join('\n')}
  IF to_regclass(${name('ratekeeper_state_expires_at')}) IS NULL THEN
    CREATE INDEX ratekeeper_state_expires_at ON ${schema}.ratekeeper_state (expires_at);
  END IF;
END ${QUOTE};
`;

/**
 * Everything `migrate` runs when something is out of date, as one multi-statement query:
 * PostgreSQL runs it as one transaction, and the advisory lock makes concurrent migrations
 * (several servers starting at once) wait for each other instead of failing on `CREATE OR
 * REPLACE`. `schema` is the quoted identifier, `literal` makes an SQL string literal.
 */
export function migration(schema: string, literal: (text: string) => string): string {
  return dollarQuoted(
    [
      `SELECT pg_advisory_xact_lock(hashtext('ratekeeper migrate'));`,
      TABLE(schema, (relation) => literal(`${schema}.${relation}`)),
      ...allCodecs.map((codec) => codecShell(schema, codec)),
      leaseShells(schema, allCodecs),
    ].join('\n'),
  );
}

/**
 * The function whose comment holds the stamp of the migration that made the schema (see
 * `migrate`): written last, in the migration's transaction.
 */
export const stampedFunction = (schema: string): string =>
  `${schema}.${decideFunction(tokenBucket)}(text, text, text[], numeric[], numeric[], numeric[], text, numeric)`;
