// One decision on one key as a single SQL statement: the fast path of a round trip that carries
// one call (the usual one). It decides exactly as `ratekeeper_decide` does for one key (./schema.ts),
// with the codecs of ./algorithms.ts written as plain SQL expressions (the sliding window log keeps
// its PL/pgSQL codec: a loop over the log's entries). Each step is a MATERIALIZED CTE, run once:
//
// - `old` locks the key's row (FOR UPDATE: under READ COMMITTED, its latest committed version);
// - `input` reads the clock only after `old` is locked: the aggregate over `old` takes its rows
//   before the clock is read, so whoever holds the lock next reads a later time;
// - `step` decides, and `until` is the row's new expiry, as in `ratekeeper_decide`; a blocked key is
//   refused whatever the codec says, writing nothing, its waits the longer of the block's and the codec's;
// - a grant updates the row, or inserts it when the key was absent (ON CONFLICT DO NOTHING); a
//   refusal writes nothing. When another caller inserted the key meanwhile the reply is null, and
//   the statement runs again (a new snapshot, which sees that row), as `ratekeeper_decide` loops;
// - after an insert, the function reclaims up to two expired rows that no one holds (SKIP LOCKED):
//   last, so it never holds a row while waiting for another.
//
// The statement is the whole body of one small PL/pgSQL function per algorithm, for one reason:
// PL/pgSQL keeps the statement's plan for the session, while the same statement sent unnamed is
// planned again on every call, which cost about ten times its execution (measured with pgbench).
// The call itself is a one-line unnamed statement, still safe behind PgBouncer in transaction mode.

/** What each algorithm reads from `input` (state, now, permits, rule) and adds: next_state (null: a refusal), remaining, retry_after, reset_after. */
type Codec = (schema: string) => string;

// floorDiv and ceilDiv of src/core/exact.ts, as ratekeeper_floor_div and ratekeeper_ceil_div
// (./algorithms.ts) but written out. Every operand is a column of a LATERAL step (OFFSET 0 keeps each
// step a step, computed once, instead of pasting its expression into every use).
const floorDiv = (n: string, d: string) => `(CASE WHEN div(${n}, ${d}) * (${d}) > ${n} THEN div(${n}, ${d}) - 1 ELSE div(${n}, ${d}) END)`;
const ceilDiv = (n: string, d: string) => `(CASE WHEN div(${n}, ${d}) * (${d}) < ${n} THEN div(${n}, ${d}) + 1 ELSE div(${n}, ${d}) END)`;

/** Token bucket in scaled units: rule = {limit, perMs, perToken}, state = {units left, time they were counted at}. */
const tokenBucket: Codec = () => `
SELECT i.*,
  CASE WHEN c.granted THEN ARRAY[c.left_units, a.t] END AS next_state,
  greatest(0, ${floorDiv('c.kept', 'r.per_token')}) AS remaining,
  CASE WHEN c.granted THEN 0 ELSE ${ceilDiv('r.cost - b.units', 'r.per_ms')} END AS retry_after,
  ${ceilDiv('r.capacity - c.kept', 'r.per_ms')} AS reset_after
FROM input i,
  LATERAL (SELECT i.rule[2] AS per_ms, i.rule[3] AS per_token, i.rule[1] * i.rule[3] AS capacity, i.permits * i.rule[3] AS cost,
    coalesce(i.state[2], i.now) AS last OFFSET 0) r,
  -- A reading earlier than the last one counts as no time passing.
  LATERAL (SELECT greatest(i.now, r.last) AS t OFFSET 0) a,
  LATERAL (SELECT least(coalesce(i.state[1], r.capacity) + (a.t - r.last) * r.per_ms, r.capacity) AS units OFFSET 0) b,
  LATERAL (SELECT b.units >= r.cost AS granted, b.units - r.cost AS left_units,
    CASE WHEN b.units >= r.cost THEN b.units - r.cost ELSE b.units END AS kept OFFSET 0) c`;

/** Fixed window: rule = {limit, windowMs}, state = {window index, count in it}. */
const fixedWindow: Codec = () => `
SELECT i.*,
  CASE WHEN c.granted THEN ARRAY[b.win, b.used + i.permits] END AS next_state,
  greatest(0, i.rule[1] - b.used - CASE WHEN c.granted THEN i.permits ELSE 0 END) AS remaining,
  CASE WHEN c.granted THEN 0 ELSE c.until_next END AS retry_after,
  c.until_next AS reset_after
FROM input i,
  LATERAL (SELECT ${floorDiv('i.now', 'i.rule[2]')} AS current_index, coalesce(i.state[1], 0) AS stored, coalesce(i.state[2], 0) AS count OFFSET 0) a,
  -- A reading from an earlier window than the stored one counts as no time passing.
  LATERAL (SELECT w.win, CASE WHEN w.win = a.stored THEN a.count ELSE 0 END AS used, greatest(i.now, w.win * i.rule[2]) AS t
    FROM (SELECT CASE WHEN a.current_index > a.stored OR a.count = 0 THEN a.current_index ELSE a.stored END AS win) w OFFSET 0) b,
  LATERAL (SELECT b.used + i.permits <= i.rule[1] AS granted, ceil((b.win + 1) * i.rule[2] - b.t) AS until_next OFFSET 0) c`;

/** Sliding window log: keeps its PL/pgSQL codec (a loop over the log's entries), called from the one statement. */
const slidingWindowLog: Codec = (s) => `
SELECT i.*, c.* FROM input i, LATERAL ${s}.ratekeeper_sliding_window_log(i.state, i.now, i.permits, i.rule, 'acquire') c`;

/**
 * Sliding window counter: rule = {limit, windowMs}, state = {window index, previous window's
 * count, current window's count, the latest grant's offset into its window}.
 */
const slidingWindowCounter: Codec = () => `
SELECT i.*,
  CASE WHEN d.granted THEN ARRAY[b.win, c.prev, c.cur + i.permits, b.elapsed] END AS next_state,
  CASE WHEN d.granted THEN d.available - i.permits ELSE greatest(0, d.available) END AS remaining,
  CASE WHEN d.granted THEN 0 ELSE coalesce(
    CASE WHEN f.wait < e.until_next THEN ceil(f.wait) END,
    CASE WHEN c.cur = 0 THEN ceil(e.until_next) ELSE ceil(e.until_next + least(
      -- In the next window the count carried over may weigh at most limit - permits.
      CASE WHEN i.rule[1] - i.permits >= c.cur THEN 0 ELSE i.rule[2] - ${floorDiv('(i.rule[1] - i.permits) * i.rule[2]', 'c.cur')} END, i.rule[2])) END) END AS retry_after,
  CASE WHEN d.granted OR c.cur > 0 THEN ceil(2 * i.rule[2] - b.elapsed) WHEN c.prev > 0 THEN ceil(i.rule[2] - b.elapsed) ELSE 0 END AS reset_after
FROM input i,
  LATERAL (SELECT ${floorDiv('i.now', 'i.rule[2]')} AS idx, coalesce(i.state[1], 0) AS stored, coalesce(i.state[2], 0) AS stored_previous,
    coalesce(i.state[3], 0) AS stored_current, coalesce(i.state[4], 0) AS stored_offset OFFSET 0) a,
  -- A reading earlier than the latest grant counts as no time passing.
  LATERAL (SELECT CASE WHEN o.advance THEN a.idx ELSE a.stored END AS win,
      CASE WHEN o.advance THEN i.now - a.idx * i.rule[2] ELSE greatest(i.now - a.stored * i.rule[2], a.stored_offset) END AS elapsed
    FROM (SELECT (a.stored_previous = 0 AND a.stored_current = 0) OR a.idx > a.stored AS advance) o OFFSET 0) b,
  LATERAL (SELECT CASE WHEN b.win = a.stored THEN a.stored_previous WHEN b.win = a.stored + 1 THEN a.stored_current ELSE 0 END AS prev,
    CASE WHEN b.win = a.stored THEN a.stored_current ELSE 0 END AS cur OFFSET 0) c,
  -- Whole permits left: the limit less the count and the previous window's weight, rounded up.
  LATERAL (SELECT v.available, v.available >= i.permits AS granted
    FROM (SELECT i.rule[1] - c.cur - ${ceilDiv('c.prev * (i.rule[2] - b.elapsed)', 'i.rule[2]')} AS available) v OFFSET 0) d,
  -- On a refusal: the weight may be at most fits, previous * (w - elapsed - wait) <= fits * w.
  LATERAL (SELECT i.rule[1] - c.cur - i.permits AS fits, i.rule[2] - b.elapsed AS until_next OFFSET 0) e,
  LATERAL (SELECT CASE WHEN e.fits >= 0 AND e.fits < c.prev THEN e.until_next - ${floorDiv('e.fits * i.rule[2]', 'c.prev')} END AS wait OFFSET 0) f`;

const codecs = {
  'token-bucket': tokenBucket,
  'fixed-window': fixedWindow,
  'sliding-window-log': slidingWindowLog,
  'sliding-window-counter': slidingWindowCounter,
} as const;

/** The statement that decides one key with `codec`, in the (quoted) `schema`: $1 row key, $2 permits, $3 caller's clock or null, $4 rule numbers. */
function statement(schema: string, codec: keyof typeof codecs): string {
  const table = `${schema}.ratekeeper_state`;
  return `WITH old AS MATERIALIZED (
  SELECT state, expires_at, blocked_until FROM ${table} WHERE key = $1 FOR UPDATE
), input AS MATERIALIZED (
  SELECT CASE WHEN old.expires_at > c.server_now THEN old.state END AS state, old.expires_at, c.server_now,
    CASE WHEN old.expires_at > c.server_now AND old.blocked_until > coalesce($3, c.server_now) THEN ceil(old.blocked_until - coalesce($3, c.server_now)) END AS blocked_ms,
    coalesce($3, c.server_now) AS now, $2 AS permits, $4 AS rule
  FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS server_now FROM (SELECT count(*) FROM old) AS locked) c
  LEFT JOIN old ON true
), step AS MATERIALIZED (
  SELECT d.*, (ceil((d.server_now + d.reset_after + $4[array_upper($4, 1)]) / 1000.0) * 1000)::bigint AS until FROM (${codecs[codec](schema)}) d
), updated AS (
  UPDATE ${table} t SET state = step.next_state, expires_at = greatest(t.expires_at, step.until)
  FROM step WHERE t.key = $1 AND step.next_state IS NOT NULL AND step.expires_at IS NOT NULL AND step.blocked_ms IS NULL
), inserted AS (
  INSERT INTO ${table} (key, state, expires_at) SELECT $1, next_state, until FROM step WHERE next_state IS NOT NULL AND expires_at IS NULL
  ON CONFLICT (key) DO NOTHING RETURNING 1
)
SELECT CASE WHEN next_state IS NOT NULL AND expires_at IS NULL AND NOT EXISTS (SELECT FROM inserted) THEN NULL
  WHEN blocked_ms IS NOT NULL THEN ARRAY[0, greatest(blocked_ms, retry_after), greatest(blocked_ms, reset_after)]
  ELSE ARRAY[remaining, retry_after, reset_after] END, EXISTS (SELECT FROM inserted), server_now FROM step`;
}

/** The function deciding one key with `codec`: `ratekeeper_acquire_token_bucket` and so on. */
export const oneKeyFunction = (codec: keyof typeof codecs): string => `ratekeeper_acquire_${codec.replaceAll('-', '_')}`;

/**
 * The one-key functions, one per codec, each returning {remaining, retryAfterMs (0: allowed),
 * resetAfterMs}. The reclaim runs as its own statement, only after an insert: inside the decision's
 * statement it cost about a fifth of every call, insert or not.
 */
export const ONE_KEY = (schema: string): string =>
  (Object.keys(codecs) as (keyof typeof codecs)[])
    .map(
      (codec) => `
CREATE OR REPLACE FUNCTION ${schema}.${oneKeyFunction(codec)}(text, numeric, numeric, numeric[]) RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
  answer numeric[];
  added boolean;
  read_at bigint;
BEGIN
  LOOP
    ${statement(schema, codec)}
    INTO answer, added, read_at;
    EXIT WHEN answer IS NOT NULL;
  END LOOP;
  IF added THEN
    DELETE FROM ${schema}.ratekeeper_state WHERE ctid = ANY (ARRAY(
      SELECT ctid FROM ${schema}.ratekeeper_state WHERE expires_at <= read_at ORDER BY expires_at LIMIT 2 FOR UPDATE SKIP LOCKED));
  END IF;
  RETURN answer;
END $fn$;
`,
    )
    .join('');
