import { DIVISION, FIXED_WINDOW, SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, TOKEN_BUCKET } from './algorithms';
import { ONE_KEY } from './one-key';

/**
 * The table: one row per key, the algorithm's state as `numeric[]` (see ./algorithms.ts) and the
 * moment, on the database server's clock in ms, from which the row is as good as absent: when its
 * key is as new, plus a slack of a quarter window (at most a minute, `expirySlackMs`), so a caller's
 * clock that lags the server's can never see its key forgotten early.
 *
 * UNLOGGED: rate-limit state is worth less than the write-ahead log it would cost on every
 * decision; a crash empties the table (every key starts over, as after a Redis restart without
 * persistence) and replicas do not carry it. The index on `expires_at` lets a new row find
 * expired ones to reclaim without scanning the table. Expiries are kept on a one-second grid and
 * never moved earlier, so most grants leave `expires_at` as it was and, with pages half empty
 * (fillfactor 50), update the row in place (a HOT update: no index entry to write).
 */
const TABLE = (schema: string) => `
CREATE SCHEMA IF NOT EXISTS ${schema};

CREATE UNLOGGED TABLE IF NOT EXISTS ${schema}.ratekeeper_state (
  key text PRIMARY KEY,
  state numeric[] NOT NULL,
  expires_at bigint NOT NULL
);
ALTER TABLE ${schema}.ratekeeper_state SET (fillfactor = 50);

CREATE INDEX IF NOT EXISTS ratekeeper_state_expires_at ON ${schema}.ratekeeper_state (expires_at);
`;

/**
 * The one function a round trip calls: decides `keys[i]` for `permits[i]` at `nows[i]` (null: the
 * server's clock) with the named algorithm's codec, for every i, and returns three numbers per key
 * in the order given (remaining, retryAfterMs with 0 for an allowance, resetAfterMs).
 *
 * - Each decision locks its key's row (`FOR UPDATE`) and only then reads the clock, so whoever
 *   holds the lock next reads a later time: time never runs backwards for a key.
 * - Rows are locked in key order whatever the order asked, so two batches sharing keys wait for
 *   each other instead of deadlocking; decisions on one key stay in the order asked.
 * - A refusal stores nothing. A missing key is decided as new and inserted only if allowed; when
 *   another caller inserted it meanwhile, the decision is taken again on that row.
 * - An expired row is a key never seen. Each row inserted deletes up to two expired rows that no
 *   one holds (`SKIP LOCKED`, after every decision of the call): the table stays near the number
 *   of live keys, with no timer, no sweep of the whole table and no lock beyond those rows.
 */
const DECIDE = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_decide(algorithm text, rule numeric[], keys text[], permits numeric[], nows numeric[], op text)
RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  reply numeric[] := array_fill(0::numeric, ARRAY[3 * cardinality(keys)]);
  i int;
  k text;
  old numeric[];
  expires bigint;
  until bigint;
  existed boolean;
  server_now bigint;
  step record;
  ordered int[];
  inserted int := 0;
BEGIN
  -- One key needs no sorting, and is the usual call.
  ordered := CASE WHEN cardinality(keys) = 1 THEN '{1}' ELSE ARRAY(SELECT o FROM unnest(keys) WITH ORDINALITY AS u(key, o) ORDER BY u.key, u.o) END;
  FOREACH i IN ARRAY ordered LOOP
    k := keys[i];
    LOOP
      SELECT s.state, s.expires_at INTO old, expires FROM ${schema}.ratekeeper_state s WHERE s.key = k FOR UPDATE;
      existed := FOUND;
      server_now := floor(extract(epoch FROM clock_timestamp()) * 1000);
      IF NOT existed OR expires <= server_now THEN old := NULL; END IF;
      IF algorithm = 'token-bucket' THEN
        step := ${schema}.ratekeeper_token_bucket(old, coalesce(nows[i], server_now), permits[i], rule, op);
      ELSIF algorithm = 'fixed-window' THEN
        step := ${schema}.ratekeeper_fixed_window(old, coalesce(nows[i], server_now), permits[i], rule, op);
      ELSIF algorithm = 'sliding-window-log' THEN
        step := ${schema}.ratekeeper_sliding_window_log(old, coalesce(nows[i], server_now), permits[i], rule, op);
      ELSIF algorithm = 'sliding-window-counter' THEN
        step := ${schema}.ratekeeper_sliding_window_counter(old, coalesce(nows[i], server_now), permits[i], rule, op);
      ELSE
        RAISE EXCEPTION 'ratekeeper: unknown algorithm %', algorithm;
      END IF;
      EXIT WHEN step.next_state IS NULL;
      -- The row lives until the key is as new, plus the slack (the rule's last number), rounded up
      -- to a whole second (see the table).
      until := ceil((server_now + step.reset_after + rule[array_upper(rule, 1)]) / 1000.0) * 1000;
      IF existed THEN
        UPDATE ${schema}.ratekeeper_state SET state = step.next_state, expires_at = greatest(expires, until) WHERE key = k;
        EXIT;
      END IF;
      INSERT INTO ${schema}.ratekeeper_state (key, state, expires_at) VALUES (k, step.next_state, until)
      ON CONFLICT (key) DO NOTHING;
      IF FOUND THEN
        inserted := inserted + 1;
        EXIT;
      END IF;
    END LOOP;
    reply[3 * i - 2] := step.remaining;
    reply[3 * i - 1] := step.retry_after;
    reply[3 * i] := step.reset_after;
  END LOOP;
  -- Last, once every key is decided: this lock-free reclaim never waits, so the rows it holds until
  -- commit cannot close a cycle with a batch waiting for this one.
  IF inserted > 0 THEN
    DELETE FROM ${schema}.ratekeeper_state WHERE ctid = ANY (ARRAY(
      SELECT ctid FROM ${schema}.ratekeeper_state WHERE expires_at <= server_now ORDER BY expires_at LIMIT 2 * inserted FOR UPDATE SKIP LOCKED));
  END IF;
  RETURN reply;
END $$;
`;

/**
 * Everything `migrate` runs, as one multi-statement query: PostgreSQL runs it as one transaction,
 * and the advisory lock makes concurrent migrations (several servers starting at once) wait for
 * each other instead of failing on `CREATE OR REPLACE`.
 */
export function migration(schema: string): string {
  return [
    `SELECT pg_advisory_xact_lock(hashtext('ratekeeper migrate'));`,
    TABLE(schema),
    DIVISION(schema),
    TOKEN_BUCKET(schema),
    FIXED_WINDOW(schema),
    SLIDING_WINDOW_LOG(schema),
    SLIDING_WINDOW_COUNTER(schema),
    DECIDE(schema),
    ONE_KEY(schema),
  ].join('\n');
}
