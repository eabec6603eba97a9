import { DIVISION, FIXED_WINDOW, SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, TOKEN_BUCKET } from './algorithms';
import { ONE_KEY, storedKey } from './one-key';
import { dollarQuoted, QUOTE } from './dollar-quote';

/** How long `migrate` waits for the table's lock when the table needs a change, in ms. */
export const MIGRATE_LOCK_TIMEOUT_MS = 2_000;

/**
 * The table: one row per key, the algorithm's state as `numeric[]` (see ./algorithms.ts; null in a
 * row kept only for its block, read by every codec as a key never seen) and the moment, on the
 * database server's clock in ms, from which the row is as good as absent: when its key is as new
 * (its debt repaid, its block over), plus a slack of a quarter window (at most a minute,
 * `expirySlackMs`), so a caller's clock that lags the server's can never see its key forgotten
 * early. Beside the state, in columns of their own so that no charge or refund can touch
 * them: `blocked_until`, when the key's block ends (on the clock the limiter decides by: the
 * server's, or the caller's readings; null when never blocked), and `era`, which tells a
 * reservation's receipt whether the state it was issued from is still the key's: a row gets a new
 * era when it is (re)born, a transaction id, which no later row of the key can have again, and when
 * a charge reaches the debt bound (which voids the receipts issued before, as in memory); and
 * `credited`, the units a token bucket's refunds have given back in this era (0 for the other
 * algorithms), which a receipt records and a later refund takes off what it owes.
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
 * rewrites the table: the new columns' defaults are not volatile, so PostgreSQL stores them once.
 * Its rows' receipts start in one era, which voids none that matters: no reservation outlives the
 * processes that made it.
 */
const TABLE = (schema: string, name: (relation: string) => string) => `
CREATE SCHEMA IF NOT EXISTS ${schema};

CREATE UNLOGGED TABLE IF NOT EXISTS ${schema}.ratekeeper_state (
  key text PRIMARY KEY,
  state numeric[],
  expires_at bigint NOT NULL,
  blocked_until numeric,
  era numeric NOT NULL DEFAULT pg_current_xact_id()::text::numeric,
  credited numeric NOT NULL DEFAULT 0
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
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = t AND attname = 'blocked_until' AND NOT attisdropped) THEN
    ALTER TABLE ${schema}.ratekeeper_state ADD COLUMN blocked_until numeric;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = t AND attname = 'era' AND NOT attisdropped) THEN
    ALTER TABLE ${schema}.ratekeeper_state ADD COLUMN era numeric NOT NULL DEFAULT pg_current_xact_id()::text::numeric;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = t AND attname = 'credited' AND NOT attisdropped) THEN
    ALTER TABLE ${schema}.ratekeeper_state ADD COLUMN credited numeric NOT NULL DEFAULT 0;
  END IF;
  IF to_regclass(${name('ratekeeper_state_expires_at')}) IS NULL THEN
    CREATE INDEX ratekeeper_state_expires_at ON ${schema}.ratekeeper_state (expires_at);
  END IF;
END ${QUOTE};
`;

/**
 * The functions of the previous schema whose arguments or answers changed: dropped before their new
 * versions are made (CREATE OR REPLACE cannot change a function's answer, and an old overload left
 * beside a new one with a default argument would make every call ambiguous).
 */
const PREVIOUS = (schema: string) =>
  [
    'ratekeeper_decide(text, numeric[], text[], numeric[], numeric[], text)',
    ...['token_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter'].map((codec) => `ratekeeper_${codec}(numeric[], numeric, numeric, numeric[], text)`),
  ]
    .map((signature) => `DROP FUNCTION IF EXISTS ${schema}.${signature};`)
    .join('\n');

/**
 * The one function a round trip calls: applies `op` to `keys[i]` with `permits[i]` at `nows[i]`
 * (null: the server's clock) with the named algorithm's codec, for every i, and returns three
 * numbers per key in the order given (remaining, retryAfterMs with 0 for an allowance,
 * resetAfterMs). `op` is a codec's operation ('acquire', 'peek', 'charge', 'reserve', 'refund'),
 * 'block' (permits[i] is the block's duration) or 'reset'. Only 'acquire' is batched; the others
 * come one key at a time. 'reserve' adds the receipt after its three numbers: the row's era and the
 * codec's two numbers, the second plus the row's `credited`; 'refund' is given that receipt, and
 * gives nothing back unless the row is still in that era (the key was not reset, did not expire, no
 * charge reached the debt bound since, and for a token bucket no refund voided the receipts).
 *
 * - Each call locks its key's row (`FOR UPDATE`; a peek, which writes nothing, `FOR SHARE`) and only
 *   then reads the clock, so whoever holds the lock next reads a later time: time never runs
 *   backwards for a key.
 * - Rows are locked in key order whatever the order asked, so two batches sharing keys wait for
 *   each other instead of deadlocking; decisions on one key stay in the order asked.
 * - A refusal and a peek store nothing. A missing key is decided as new and inserted only if
 *   something is to be stored; when another caller inserted it meanwhile, the call is taken again
 *   on that row.
 * - A blocked key refuses 'acquire', 'reserve' and 'peek', spending nothing, with retryAfterMs the
 *   longer of the block's time left and what the algorithm alone would say; 'charge' and 'refund'
 *   neither see nor lift a block, and a shorter block never shortens a longer one. The row's
 *   expiry covers the block, so no reclaim removes a blocked row.
 * - An expired row is a key never seen, block and era included. Each row inserted deletes up to two
 *   expired rows that no one holds (`SKIP LOCKED`, after every decision of the call): the table
 *   stays near the number of live keys, with no timer, no sweep of the whole table and no lock
 *   beyond those rows.
 */
const DECIDE = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_decide(algorithm text, rule numeric[], keys text[], permits numeric[], nows numeric[], op text, receipt numeric[] DEFAULT NULL)
RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  reply numeric[] := array_fill(0::numeric, ARRAY[3 * cardinality(keys)]);
  i int;
  k text;
  old numeric[];
  expires bigint;
  blocked numeric;
  row_era numeric;
  row_credited numeric;
  existed boolean;
  server_now bigint;
  now numeric;
  codec_op text;
  amount numeric;
  refused boolean;
  step record;
  until bigint;
  ordered int[];
  inserted int := 0;
BEGIN
  IF op = 'reset' THEN
    DELETE FROM ${schema}.ratekeeper_state WHERE key = ANY (ARRAY(SELECT ${storedKey('u')} FROM unnest(keys) AS u));
    RETURN '{}';
  END IF;
  -- One key needs no sorting, and is the usual call.
  ordered := CASE WHEN cardinality(keys) = 1 THEN '{1}' ELSE ARRAY(SELECT o FROM unnest(keys) WITH ORDINALITY AS u(key, o) ORDER BY u.key, u.o) END;
  FOREACH i IN ARRAY ordered LOOP
    k := ${storedKey('keys[i]')};
    LOOP
      IF op = 'peek' THEN
        SELECT s.state, s.expires_at, s.blocked_until, s.era, s.credited INTO old, expires, blocked, row_era, row_credited FROM ${schema}.ratekeeper_state s WHERE s.key = k FOR SHARE;
      ELSE
        SELECT s.state, s.expires_at, s.blocked_until, s.era, s.credited INTO old, expires, blocked, row_era, row_credited FROM ${schema}.ratekeeper_state s WHERE s.key = k FOR UPDATE;
      END IF;
      existed := FOUND;
      server_now := floor(extract(epoch FROM clock_timestamp()) * 1000);
      now := coalesce(nows[i], server_now);
      IF NOT existed OR expires <= server_now THEN old := NULL; blocked := NULL; row_era := NULL; row_credited := 0; END IF;
      -- A log whose last grant was given back holds no entry: a fresh state, as a null one is.
      IF cardinality(old) = 0 THEN old := NULL; END IF;
      codec_op := op;
      amount := permits[i];
      refused := blocked > now AND op IN ('acquire', 'reserve', 'peek');
      IF op = 'block' THEN
        blocked := greatest(blocked, now + amount);
        codec_op := 'peek';
        amount := 0;
      ELSIF refused THEN
        -- What the algorithm alone would answer, spending nothing.
        codec_op := 'peek';
      ELSIF op = 'refund' AND (row_era IS DISTINCT FROM receipt[1] OR amount = 0) THEN
        -- Not the state the reservation was granted from, or nothing to give back: the state now.
        codec_op := 'peek';
        amount := 0;
      END IF;
      IF algorithm = 'token-bucket' THEN
        -- The deficit the grant left, less what other refunds gave back since (the receipt's second
        -- number is that deficit plus the units given back by the grant).
        step := ${schema}.ratekeeper_token_bucket(old, now, amount, rule, codec_op, ARRAY[receipt[2], receipt[3] - row_credited]);
      ELSIF algorithm = 'fixed-window' THEN
        step := ${schema}.ratekeeper_fixed_window(old, now, amount, rule, codec_op, receipt[2:3]);
      ELSIF algorithm = 'sliding-window-log' THEN
        step := ${schema}.ratekeeper_sliding_window_log(old, now, amount, rule, codec_op, receipt[2:3]);
      ELSIF algorithm = 'sliding-window-counter' THEN
        step := ${schema}.ratekeeper_sliding_window_counter(old, now, amount, rule, codec_op, receipt[2:3]);
      ELSE
        RAISE EXCEPTION 'ratekeeper: unknown algorithm %', algorithm;
      END IF;
      EXIT WHEN step.next_state IS NULL AND op <> 'block';
      -- What a token bucket's refund gave back is counted; past 2^53 - 1, as in memory, the receipts
      -- are voided instead and the count starts again at 0.
      IF codec_op = 'refund' AND NOT step.forgave AND step.issued IS NOT NULL THEN
        IF step.issued[1] > 9007199254740991 - row_credited THEN
          row_era := NULL;
          row_credited := 0;
        ELSE
          row_credited := row_credited + step.issued[1];
        END IF;
      END IF;
      IF row_era IS NULL OR step.forgave THEN row_era := pg_current_xact_id()::text::numeric; END IF;
      -- The row lives until the key is as new (its debt repaid, its block over), plus the slack (the
      -- rule's last number), rounded up to a whole second (see the table).
      until := ceil((server_now + greatest(step.reset_after, blocked - now) + rule[array_upper(rule, 1)]) / 1000.0) * 1000;
      IF existed THEN
        UPDATE ${schema}.ratekeeper_state
        SET state = coalesce(step.next_state, old), expires_at = greatest(expires, until), blocked_until = blocked, era = row_era, credited = row_credited
        WHERE key = k;
        EXIT;
      END IF;
      INSERT INTO ${schema}.ratekeeper_state (key, state, expires_at, blocked_until, era, credited) VALUES (k, step.next_state, until, blocked, row_era, row_credited)
      ON CONFLICT (key) DO NOTHING;
      IF FOUND THEN
        inserted := inserted + 1;
        EXIT;
      END IF;
    END LOOP;
    IF refused THEN
      -- Refused until both the block and the algorithm allow, nothing available meanwhile.
      reply[3 * i - 2] := 0;
      reply[3 * i - 1] := greatest(ceil(blocked - now), step.retry_after);
      reply[3 * i] := greatest(ceil(blocked - now), step.reset_after);
    ELSE
      reply[3 * i - 2] := step.remaining;
      reply[3 * i - 1] := step.retry_after;
      reply[3 * i] := step.reset_after;
    END IF;
  END LOOP;
  -- Last, once every key is decided: this lock-free reclaim never waits, so the rows it holds until
  -- commit cannot close a cycle with a batch waiting for this one.
  IF inserted > 0 THEN
    DELETE FROM ${schema}.ratekeeper_state WHERE ctid = ANY (ARRAY(
      SELECT ctid FROM ${schema}.ratekeeper_state WHERE expires_at <= server_now ORDER BY expires_at LIMIT 2 * inserted FOR UPDATE SKIP LOCKED));
  END IF;
  IF op = 'reserve' THEN
    RETURN reply || ARRAY[coalesce(row_era, 0), coalesce(step.issued[1], 0), coalesce(step.issued[2], 0) + row_credited];
  END IF;
  RETURN reply;
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
      PREVIOUS(schema),
      DIVISION(schema),
      TOKEN_BUCKET(schema),
      FIXED_WINDOW(schema),
      SLIDING_WINDOW_LOG(schema),
      SLIDING_WINDOW_COUNTER(schema),
      DECIDE(schema),
      ONE_KEY(schema),
    ].join('\n'),
  );
}

/**
 * The function whose comment holds the stamp of the migration that made the schema (see
 * `migrate`): written last, in the migration's transaction.
 */
export const stampedFunction = (schema: string): string => `${schema}.ratekeeper_decide(text, numeric[], text[], numeric[], numeric[], text, numeric[])`;
