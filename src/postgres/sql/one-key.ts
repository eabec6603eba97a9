// The fast path of `acquire`: one small PL/pgSQL function per algorithm for a call alone in its
// round trip (the usual one), and one for a batch of calls, each deciding exactly as
// `ratekeeper_decide` does (./schema.ts) with the codecs of ./algorithms.ts written out inline.
// Each key's decision is a step of three parts:
//
// - `SELECT ... FOR UPDATE` locks the key's row (under READ COMMITTED, its latest committed
//   version) and only then is the clock read, so whoever holds the lock next reads a later time;
// - the algorithm decides in a few PL/pgSQL expressions, setting `answer` (remaining,
//   retryAfterMs with 0 for a grant, resetAfterMs) and `next`, the state to store (null: a
//   refusal, which writes nothing); a blocked key is refused whatever the algorithm says, writing
//   nothing, with nothing remaining and the longer of the block's waits and the algorithm's;
// - a grant updates the locked row (found by its ctid, which cannot change while it is locked: no
//   second index lookup; an expired row is reborn: no block, a new era and nothing credited, so
//   that no receipt issued from its old state refunds into the new one), or inserts it when the key
//   was absent (ON CONFLICT DO NOTHING: when another caller inserted it meanwhile, the step runs
//   again and finds that row, as `ratekeeper_decide` loops).
//
// Why PL/pgSQL statements rather than one SQL statement: a call's cost is the statements it
// executes and the expressions it evaluates, each set up again in every transaction, and a single
// CTE statement (lock, clock, decide in LATERAL steps, update or insert) cost more than this step
// (bench/HISTORY.md). The same step in bigint instead of numeric saved nothing beyond the noise,
// so every rule, up to 2^53 × 2^42, takes this one path.
//
// Each function is called with a one-line unnamed statement (safe behind PgBouncer in transaction
// mode), and PL/pgSQL keeps its statements' plans for the session.

import type { SqlPlan } from '../plans';
import { QUOTE } from './dollar-quote';

/**
 * The longest row key, in UTF-8 bytes, stored as it is. A B-tree entry holds at most 2704 bytes, so
 * a longer key, stored as it is, failed its every call (and, under `'allow'`, was let through
 * unlimited). Keys that fit are kept as they were (an upgrade forgives no key), longer ones become
 * `sha256/` and the SHA-256 of the whole row key in hex: no plain row key can be that, since every
 * one holds a `:` (`prefix + algorithm + ':' + ...`) and the digest's form none.
 */
export const LONG_KEY_BYTES = 2000;

/** The row key stored for the key held in the SQL expression `key` (see {@link LONG_KEY_BYTES}). */
export const storedKey = (key: string): string =>
  `CASE WHEN octet_length(${key}) > ${LONG_KEY_BYTES} THEN 'sha256/' || encode(sha256(convert_to(${key}, 'UTF8')), 'hex') ELSE ${key} END`;

/** What a batch answers, three times, for a key whose row another transaction held: undecided, to be sent again alone. */
export const SKIPPED = -1;

/** The algorithms with a fast path: each codec of ./algorithms.ts that `acquire` uses. */
type FastCodec = SqlPlan['codec'];

/** An algorithm's step, deciding `prm` permits at `now` from the stored state `s` (null: a new key) and `rule`. */
interface Decide {
  /** PL/pgSQL declarations of its own variables. */
  readonly declare: string;
  /** Statements that set `answer` and `next`. */
  readonly body: (schema: string) => string;
}

// floorDiv and ceilDiv of src/core/exact.ts (ratekeeper_floor_div and ratekeeper_ceil_div of
// ./algorithms.ts) written out: an SQL function call in a PL/pgSQL expression costs more than the
// arithmetic. `div` truncates; one compare corrects it. Operands are variables or short expressions.
const floorDiv = (n: string, d: string) => `(CASE WHEN div(${n}, ${d}) * ${d} > ${n} THEN div(${n}, ${d}) - 1 ELSE div(${n}, ${d}) END)`;
const ceilDiv = (n: string, d: string) => `(CASE WHEN div(${n}, ${d}) * ${d} < ${n} THEN div(${n}, ${d}) + 1 ELSE div(${n}, ${d}) END)`;

/** Token bucket in scaled units: rule = {limit, perMs, perToken}, state = {units left, time they were counted at}. */
const tokenBucket: Decide = {
  declare: 't numeric; units numeric; capacity numeric; cost numeric;',
  body: () => `
    -- A reading earlier than the last one counts as no time passing; a new key's bucket is full.
    t := greatest(now, s[2]);
    capacity := rule[1] * rule[3];
    cost := prm * rule[3];
    units := least(coalesce(s[1] + (t - s[2]) * rule[2], capacity), capacity);
    IF units >= cost THEN
      units := units - cost;
      next := ARRAY[units, t];
      answer := ARRAY[${floorDiv('units', 'rule[3]')}, 0, ${ceilDiv('capacity - units', 'rule[2]')}];
    ELSE
      next := NULL;
      -- In debt (after a charge) the units are below zero: none remaining.
      answer := ARRAY[greatest(0, ${floorDiv('units', 'rule[3]')}), ${ceilDiv('cost - units', 'rule[2]')}, ${ceilDiv('capacity - units', 'rule[2]')}];
    END IF;`,
};

/** Fixed window: rule = {limit, windowMs}, state = {window index, count in it}. */
const fixedWindow: Decide = {
  declare: 'win numeric; used numeric; until_next numeric;',
  body: () => `
    -- A reading from an earlier window than the stored one counts as no time passing.
    win := ${floorDiv('now', 'rule[2]')};
    IF s[2] <> 0 AND win <= s[1] THEN win := s[1]; END IF;
    used := CASE WHEN win = s[1] THEN s[2] ELSE 0 END;
    until_next := ceil((win + 1) * rule[2] - greatest(now, win * rule[2]));
    IF used + prm <= rule[1] THEN
      next := ARRAY[win, used + prm];
      answer := ARRAY[rule[1] - used - prm, 0, until_next];
    ELSE
      next := NULL;
      -- In debt (after a charge) the count passes the limit: none remaining.
      answer := ARRAY[greatest(0, rule[1] - used), until_next, until_next];
    END IF;`,
};

/** Sliding window log: keeps its PL/pgSQL codec (a loop over the log's entries). */
const slidingWindowLog: Decide = {
  declare: 'step record;',
  body: (schema) => `
    step := ${schema}.ratekeeper_sliding_window_log(s, now, prm, rule, 'acquire', NULL);
    next := step.next_state;
    answer := ARRAY[step.remaining, step.retry_after, step.reset_after];`,
};

/**
 * Sliding window counter: rule = {limit, windowMs}, state = {window index, previous window's
 * count, current window's count, the latest grant's offset into its window}.
 */
const slidingWindowCounter: Decide = {
  declare: 'idx numeric; win numeric; elapsed numeric; previous numeric; current numeric; available numeric; until_next numeric; fits numeric; wait numeric; retry numeric;',
  body: () => `
    idx := ${floorDiv('now', 'rule[2]')};
    -- A reading earlier than the latest grant counts as no time passing; a key with nothing counted starts at now.
    IF s IS NULL OR (s[2] = 0 AND s[3] = 0) OR idx > s[1] THEN
      win := idx;
      elapsed := now - win * rule[2];
    ELSE
      win := s[1];
      elapsed := greatest(now - win * rule[2], s[4]);
    END IF;
    previous := CASE WHEN win = s[1] THEN s[2] WHEN win = s[1] + 1 THEN s[3] ELSE 0 END;
    current := CASE WHEN win = s[1] THEN s[3] ELSE 0 END;
    -- Whole permits left: the limit less the count and the previous window's weight, rounded up.
    available := rule[1] - current - ${ceilDiv('previous * (rule[2] - elapsed)', 'rule[2]')};
    IF available >= prm THEN
      next := ARRAY[win, previous, current + prm, elapsed];
      answer := ARRAY[available - prm, 0, ceil(2 * rule[2] - elapsed)];
    ELSE
      next := NULL;
      until_next := rule[2] - elapsed;
      retry := NULL;
      -- The weight may be at most fits: previous * (w - elapsed - wait) <= fits * w.
      fits := rule[1] - current - prm;
      IF fits >= 0 AND fits < previous THEN
        wait := until_next - ${floorDiv('fits * rule[2]', 'previous')};
        IF wait < until_next THEN retry := ceil(wait); END IF;
      END IF;
      IF retry IS NULL THEN
        -- In the next window the count carried over may weigh at most limit - permits.
        retry := CASE WHEN current = 0 THEN ceil(until_next) ELSE ceil(until_next + least(
          CASE WHEN rule[1] - prm >= current THEN 0 ELSE rule[2] - ${floorDiv('(rule[1] - prm) * rule[2]', 'current')} END, rule[2])) END;
      END IF;
      answer := ARRAY[greatest(0, available), retry,
        CASE WHEN current > 0 THEN ceil(2 * rule[2] - elapsed) WHEN previous > 0 THEN ceil(rule[2] - elapsed) ELSE 0 END];
    END IF;`,
};

const decides: Readonly<Record<FastCodec, Decide>> = {
  'token-bucket': tokenBucket,
  'fixed-window': fixedWindow,
  'sliding-window-log': slidingWindowLog,
  'sliding-window-counter': slidingWindowCounter,
};

/** The variables every step uses, beside its algorithm's own. */
const DECLARE = 'tid tid; s numeric[]; expires bigint; blocked numeric; n bigint; now numeric; answer numeric[]; next numeric[]; inserted int := 0;';

/**
 * One decision on key `k` for `prm` permits at the caller's clock `clk` (null: the server's), as a
 * loop that ends decided; or, when `skipHeld` and another transaction holds the key's row, that
 * ends with a null `answer`, deciding nothing and waiting for no one.
 */
const step = (schema: string, codec: FastCodec, skipHeld: boolean): string => {
  const table = `${schema}.ratekeeper_state`;
  const lock = skipHeld
    ? `SELECT ctid, state, expires_at, blocked_until INTO tid, s, expires, blocked FROM ${table} WHERE key = k FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
      -- Absent, or held: a held row is still seen without a lock.
      PERFORM FROM ${table} WHERE key = k;
      IF FOUND THEN
        answer := NULL;
        EXIT;
      END IF;
    END IF;`
    : `SELECT ctid, state, expires_at, blocked_until INTO tid, s, expires, blocked FROM ${table} WHERE key = k FOR UPDATE;`;
  return `
  LOOP
    ${lock}
    n := floor(extract(epoch FROM clock_timestamp()) * 1000);
    -- An expired row is a key never seen, its block included; a row kept only for its block (a null
    -- state) or a log whose last grant was given back (an empty one) is a new key too.
    IF expires <= n THEN s := NULL; blocked := NULL; END IF;
    IF cardinality(s) = 0 THEN s := NULL; END IF;
    now := coalesce(clk, n);
    ${decides[codec].body(schema)}
    IF blocked > now THEN
      -- Blocked: refused until both the block and the algorithm allow, writing nothing.
      next := NULL;
      answer := ARRAY[0, greatest(ceil(blocked - now), answer[2]), greatest(ceil(blocked - now), answer[3])];
    END IF;
    EXIT WHEN next IS NULL;
    -- The row lives until the key is as new, plus the slack (the rule's last number), rounded up to
    -- a whole second and never earlier than it was (see the table in ./schema.ts).
    IF tid IS NOT NULL AND expires <= n THEN
      -- Reborn: as new as an inserted row (see the table in ./schema.ts).
      UPDATE ${table} SET state = next, expires_at = greatest(expires_at, ceil((n + answer[3] + rule[array_upper(rule, 1)]) / 1000.0) * 1000),
        blocked_until = NULL, era = pg_current_xact_id()::text::numeric, credited = 0 WHERE ctid = tid;
      EXIT;
    ELSIF tid IS NOT NULL THEN
      UPDATE ${table} SET state = next, expires_at = greatest(expires_at, ceil((n + answer[3] + rule[array_upper(rule, 1)]) / 1000.0) * 1000) WHERE ctid = tid;
      EXIT;
    END IF;
    INSERT INTO ${table} (key, state, expires_at) VALUES (k, next, ceil((n + answer[3] + rule[array_upper(rule, 1)]) / 1000.0) * 1000)
    ON CONFLICT (key) DO NOTHING;
    IF FOUND THEN
      inserted := inserted + 1;
      EXIT;
    END IF;
  END LOOP;`;
};

/** Deletes up to `count` expired rows that no one holds (SKIP LOCKED): it never waits, so it runs last. */
const reclaim = (schema: string, count: string) => `
  IF inserted > 0 THEN
    DELETE FROM ${schema}.ratekeeper_state WHERE ctid = ANY (ARRAY(
      SELECT ctid FROM ${schema}.ratekeeper_state WHERE expires_at <= n ORDER BY expires_at LIMIT ${count} FOR UPDATE SKIP LOCKED));
  END IF;`;

const suffix = (codec: FastCodec) => codec.replaceAll('-', '_');

/** The function deciding one key with `codec`: `ratekeeper_acquire_token_bucket` and so on. */
export const oneKeyFunction = (codec: FastCodec): string => `ratekeeper_acquire_${suffix(codec)}`;

/** The function deciding a batch of keys with `codec`: `ratekeeper_acquire_many_token_bucket` and so on. */
export const manyKeysFunction = (codec: FastCodec): string => `ratekeeper_acquire_many_${suffix(codec)}`;

/**
 * The fast-path functions, two per codec:
 *
 * - `ratekeeper_acquire_<codec>(key, permits, now, rule)` decides one key and returns {remaining,
 *   retryAfterMs (0: allowed), resetAfterMs}. A row it inserts reclaims up to two expired rows.
 * - `ratekeeper_acquire_many_<codec>(keys, permits, nows, rule)` decides `keys[i]` for
 *   `permits[i]` at `nows[i]` (null: the server's clock) for every i, three numbers per key in
 *   the order given. It takes rows in key order whatever the order asked, decisions on one key in
 *   the order asked, and never waits for a row another transaction holds: that key, and its later
 *   calls in the batch, answer {-1, -1, -1}, undecided (the limiter sends them again, alone, where
 *   the one-key function waits for the row up to `lock_timeout`). So one stuck row never holds up
 *   the other keys of its batch, and batches never wait for each other. It reclaims (two expired
 *   rows per row inserted) once every key is decided.
 */
export const ONE_KEY = (schema: string): string =>
  (Object.keys(decides) as FastCodec[])
    .map(
      (codec) => `
CREATE OR REPLACE FUNCTION ${schema}.${oneKeyFunction(codec)}(k text, prm numeric, clk numeric, rule numeric[]) RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  ${DECLARE}
  ${decides[codec].declare}
BEGIN
  k := ${storedKey('k')};
  ${step(schema, codec, false)}
  ${reclaim(schema, '2')}
  RETURN answer;
END ${QUOTE};

CREATE OR REPLACE FUNCTION ${schema}.${manyKeysFunction(codec)}(keys text[], permits numeric[], nows numeric[], rule numeric[]) RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  ${DECLARE}
  ${decides[codec].declare}
  reply numeric[] := array_fill(0::numeric, ARRAY[3 * cardinality(keys)]);
  i int;
  k text;
  prm numeric;
  clk numeric;
  held text;
BEGIN
  FOREACH i IN ARRAY ARRAY(SELECT o FROM unnest(keys) WITH ORDINALITY AS u(key, o) ORDER BY u.key, u.o) LOOP
    k := ${storedKey('keys[i]')};
    prm := permits[i];
    clk := nows[i];
    IF k = held THEN
      answer := NULL;
    ELSE
      ${step(schema, codec, true)}
    END IF;
    IF answer IS NULL THEN
      -- Held by another transaction: undecided (${SKIPPED}), and so are the key's later calls, which come next.
      held := k;
      answer := ARRAY[${SKIPPED}, ${SKIPPED}, ${SKIPPED}];
    END IF;
    reply[3 * i - 2 : 3 * i] := answer;
  END LOOP;
  ${reclaim(schema, '2 * inserted')}
  RETURN reply;
END ${QUOTE};
`,
    )
    .join('');
