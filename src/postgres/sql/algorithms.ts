// The five algorithms as PL/pgSQL state codecs: each is a pure function from (stored state, now,
// permits, rule, operation) to (state to store, or null to store nothing; remaining, retryAfterMs,
// resetAfterMs), the operations of src/algorithms in the same order, in `numeric`: exact for every
// rule of the domain (limit × windowMs passes bigint's range), so each decides exactly as its
// in-memory twin given the same clock readings. A null state is a key never seen. `rule` holds the
// numbers of `ruleArgs` in src/postgres/plans.ts.
//
// The operation (`op`) is one of the in-memory algorithm's own (src/algorithms/*.ts), with its rules:
// - 'acquire': tryAcquire; 'reserve': the same, and the receipt a refund needs in `issued`;
// - 'peek': the same decision, writing nothing; 0 permits is the state now (allowed even in debt);
// - 'charge': never refused, into debt at most one full limit deep (DEBT_LIMITS); `forgave` says the
//   bound dropped part of it, which voids the receipts issued before (see ratekeeper_decide);
// - 'refund': gives back up to `permits` of the reservation whose receipt is `receipt`, only what is
//   still counted, then answers the state now; the token bucket's says in `issued` what it gave back.
// Every answer is {remaining, retryAfterMs (0: allowed), resetAfterMs}. Blocks are not the codecs'
// business: ratekeeper_decide keeps them in their own column.

import { DEBT_LIMITS } from '../../algorithms/accounting';
import { QUOTE } from './dollar-quote';

/** `floorDiv` and `ceilDiv` of src/core/exact.ts: `div` truncates, one compare corrects it. */
export const DIVISION = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_floor_div(n numeric, d numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS ${QUOTE} SELECT CASE WHEN div(n, d) * d > n THEN div(n, d) - 1 ELSE div(n, d) END ${QUOTE};

CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_ceil_div(n numeric, d numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS ${QUOTE} SELECT CASE WHEN div(n, d) * d < n THEN div(n, d) + 1 ELSE div(n, d) END ${QUOTE};
`;

/** The codecs' arguments and answers; `receipt` is read by 'refund' only, `issued` written by 'reserve' only. */
const SIGNATURE = `(state numeric[], now numeric, permits numeric, rule numeric[], op text, receipt numeric[] DEFAULT NULL,
  OUT next_state numeric[], OUT remaining numeric, OUT retry_after numeric, OUT reset_after numeric, OUT issued numeric[], OUT forgave boolean)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE`;

/** What a key may count as used: `(1 + DEBT_LIMITS) × limit`, never past 2^53 − 1, as `usageBound` in memory. */
const bound = (limit: string) => `least(${1 + DEBT_LIMITS} * ${limit}, 9007199254740991)`;

const UNKNOWN_OP = `RAISE EXCEPTION 'ratekeeper: unknown operation %', op;`;

/**
 * Token bucket (and leaky bucket) in scaled units: rule = {limit, perMs, perToken}, state = {units
 * left, time they were counted at}. In debt the units go below zero, one full bucket at most. A
 * receipt is {the time of the grant, the deficit it left}: refill and refunds are all that repay a
 * deficit, so a refund gives back at most what refill has not repaid yet, less what the key's other
 * refunds gave back since (ratekeeper_decide counts those, in the row's \`credited\`, and takes them
 * off the deficit it passes). A refund answers in \`issued\` the units it gave back; on a wide bucket
 * (a capacity past 2^52 units, see Plan.wide in src/algorithms/token-bucket.ts) it voids the receipts
 * issued before (\`forgave\`) instead, as in memory.
 */
export const TOKEN_BUCKET = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_token_bucket${SIGNATURE}
AS ${QUOTE}
DECLARE
  per_ms numeric := rule[2];
  per_token numeric := rule[3];
  capacity numeric := rule[1] * rule[3];
  units numeric := capacity;
  last numeric := now;
  cost numeric := permits * rule[3];
  owed numeric;
BEGIN
  forgave := false;
  IF state IS NOT NULL THEN units := state[1]; last := state[2]; END IF;
  -- A reading earlier than the last one counts as no time passing.
  IF now < last THEN now := last; END IF;
  units := least(units + (now - last) * per_ms, capacity);
  IF op = 'charge' THEN
    units := units - cost;
    forgave := units < -${DEBT_LIMITS} * capacity;
    units := greatest(units, -${DEBT_LIMITS} * capacity);
    next_state := ARRAY[units, now];
  ELSIF op = 'refund' THEN
    owed := least(cost, receipt[2] - (now - receipt[1]) * per_ms);
    IF owed > 0 THEN
      issued := ARRAY[least(units + owed, capacity) - units];
      forgave := 2 * capacity > 9007199254740991;
      units := least(units + owed, capacity);
      next_state := ARRAY[units, now];
    END IF;
  ELSIF op IN ('acquire', 'reserve') OR (op = 'peek' AND permits > 0) THEN
    IF units < cost THEN
      remaining := greatest(0, ${schema}.ratekeeper_floor_div(units, per_token));
      retry_after := ${schema}.ratekeeper_ceil_div(cost - units, per_ms);
      reset_after := ${schema}.ratekeeper_ceil_div(capacity - units, per_ms);
      RETURN;
    END IF;
    units := units - cost;
    IF op <> 'peek' THEN next_state := ARRAY[units, now]; END IF;
    IF op = 'reserve' THEN issued := ARRAY[now, capacity - units]; END IF;
  ELSIF op <> 'peek' THEN
    ${UNKNOWN_OP}
  END IF;
  -- Whole tokens held (none in debt), and the time until full.
  remaining := greatest(0, ${schema}.ratekeeper_floor_div(units, per_token));
  retry_after := 0;
  reset_after := ${schema}.ratekeeper_ceil_div(capacity - units, per_ms);
END ${QUOTE};
`;

/**
 * Fixed window: rule = {limit, windowMs}, state = {window index, count in it}. In debt the count
 * passes the limit (up to twice it, below 2^53) until the window ends; what passes the bound is
 * dropped and voids the receipts issued before (era). A receipt is {the window, 0}.
 */
export const FIXED_WINDOW = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_fixed_window${SIGNATURE}
AS ${QUOTE}
DECLARE
  lim numeric := rule[1];
  w numeric := rule[2];
  current numeric := ${schema}.ratekeeper_floor_div(now, rule[2]);
  stored numeric := 0;
  count numeric := 0;
  win numeric;
  used numeric;
  until_next numeric;
BEGIN
  forgave := false;
  IF state IS NOT NULL THEN stored := state[1]; count := state[2]; END IF;
  IF op = 'refund' THEN
    -- Only from the window the permits were counted in, and only while it lasts; then the state now.
    IF receipt[1] = stored AND current <= stored AND least(permits, count) > 0 THEN
      count := count - least(permits, count);
      next_state := ARRAY[stored, count];
    END IF;
    permits := 0;
  ELSIF op NOT IN ('acquire', 'reserve', 'peek', 'charge') THEN
    ${UNKNOWN_OP}
  END IF;
  -- A reading from an earlier window than the stored one counts as no time passing.
  win := CASE WHEN current > stored OR count = 0 THEN current ELSE stored END;
  now := greatest(now, win * w);
  used := CASE WHEN win = stored THEN count ELSE 0 END;
  until_next := ceil((win + 1) * w - now);
  IF used + permits > lim THEN
    reset_after := until_next;
    IF op = 'charge' THEN
      -- What passes the bound is dropped, and voids the receipts issued before.
      forgave := used + permits > ${bound('lim')};
      next_state := ARRAY[win, least(used + permits, ${bound('lim')})];
      remaining := 0;
      retry_after := 0;
    ELSE
      remaining := greatest(0, lim - used);
      -- The state now of a key in debt: for a dashboard, simply none left.
      retry_after := CASE WHEN permits = 0 THEN 0 ELSE until_next END;
    END IF;
    RETURN;
  END IF;
  IF op IN ('acquire', 'reserve', 'charge') THEN next_state := ARRAY[win, used + permits]; END IF;
  IF op = 'reserve' THEN issued := ARRAY[win, 0]; END IF;
  remaining := lim - used - permits;
  retry_after := 0;
  reset_after := CASE WHEN used + permits = 0 THEN 0 ELSE until_next END;
END ${QUOTE};
`;

/**
 * Sliding window log, one entry per grant: rule = {limit, windowMs}, state = {t1, n1, t2, n2, ...},
 * the times of the grants still in the window (oldest first) and how many permits each took. In
 * debt the live permits pass the limit (up to twice it, and below 2^53 as in memory), the charge
 * logged now. A receipt is {the grant's time, 0}.
 */
export const SLIDING_WINDOW_LOG = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_sliding_window_log${SIGNATURE}
AS ${QUOTE}
DECLARE
  lim numeric := rule[1];
  w numeric := rule[2];
  entries int := coalesce(cardinality(state), 0) / 2;
  reading numeric := now;
  newest numeric;
  first_live int := 1;
  live numeric := 0;
  rank numeric;
  room numeric;
  logged numeric;
  i int;
BEGIN
  forgave := false;
  -- A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
  IF entries > 0 AND now < state[2 * entries - 1] THEN now := state[2 * entries - 1]; END IF;
  IF op = 'refund' THEN
    -- Only from the grant logged at the receipt's time, while it is in the window; an entry left
    -- with none goes. Then the state now.
    IF receipt[1] + w > now AND permits > 0 THEN
      FOR i IN 1 .. entries LOOP
        CONTINUE WHEN state[2 * i - 1] <> receipt[1];
        IF state[2 * i] > permits THEN
          state[2 * i] := state[2 * i] - permits;
        ELSE
          state := state[1 : 2 * i - 2] || state[2 * i + 1 : 2 * entries];
          entries := entries - 1;
        END IF;
        next_state := state;
        EXIT;
      END LOOP;
      now := CASE WHEN entries > 0 THEN greatest(reading, state[2 * entries - 1]) ELSE reading END;
    END IF;
    permits := 0;
  ELSIF op NOT IN ('acquire', 'reserve', 'peek', 'charge') THEN
    ${UNKNOWN_OP}
  END IF;
  IF entries > 0 THEN newest := state[2 * entries - 1]; END IF;
  FOR i IN 1 .. entries LOOP
    IF state[2 * i - 1] <= now - w THEN
      first_live := i + 1;
    ELSE
      live := live + state[2 * i];
    END IF;
  END LOOP;
  IF op = 'charge' THEN
    forgave := live + permits > ${bound('lim')};
    logged := least(permits, ${bound('lim')});
    -- Past the bound the oldest permits are forgiven: they would have left first, so spending more
    -- never leaves a key better off. rank: how many of them, taken from the oldest entries.
    room := least(live, ${bound('lim')} - logged);
    rank := live - room;
    next_state := '{}';
    FOR i IN first_live .. entries LOOP
      IF rank >= state[2 * i] THEN
        rank := rank - state[2 * i];
      ELSE
        next_state := next_state || ARRAY[state[2 * i - 1], state[2 * i] - rank];
        rank := 0;
      END IF;
    END LOOP;
    live := room;
    IF cardinality(next_state) > 0 AND newest = now THEN
      next_state[cardinality(next_state)] := next_state[cardinality(next_state)] + logged;
    ELSE
      next_state := next_state || ARRAY[now, logged];
    END IF;
    remaining := greatest(0, lim - live - logged);
    retry_after := 0;
    reset_after := greatest(1, ceil(next_state[cardinality(next_state) - 1] + w - now));
    RETURN;
  END IF;
  IF live + permits > lim THEN
    -- The request fits once the (live + permits - limit)-th live permit has left.
    rank := live + permits - lim;
    FOR i IN first_live .. entries LOOP
      rank := rank - state[2 * i];
      IF rank <= 0 THEN
        retry_after := ceil(state[2 * i - 1] + w - now);
        EXIT;
      END IF;
    END LOOP;
    remaining := greatest(0, lim - live);
    reset_after := ceil(newest + w - now);
    -- The state now of a key in debt: allowed, none left.
    IF permits = 0 THEN retry_after := 0; END IF;
    RETURN;
  END IF;
  IF op IN ('acquire', 'reserve') THEN
    IF entries >= first_live AND newest = now THEN
      next_state := state[2 * first_live - 1 : 2 * entries - 1] || (state[2 * entries] + permits);
    ELSE
      next_state := coalesce(state[2 * first_live - 1 : 2 * entries], '{}') || ARRAY[now, permits];
    END IF;
  END IF;
  IF op = 'reserve' THEN issued := ARRAY[now, 0]; END IF;
  retry_after := 0;
  IF permits = 0 THEN
    remaining := lim - live;
    -- The newest grant is still in the window, so the state is as new in at least 1 ms.
    reset_after := CASE WHEN live = 0 THEN 0 ELSE greatest(1, ceil(newest + w - now)) END;
  ELSE
    remaining := lim - live - permits;
    -- The newest hit, now, leaves at now + windowMs: from then on the key is as new.
    reset_after := ceil(w);
  END IF;
END ${QUOTE};
`;

/**
 * Sliding window counter: rule = {limit, windowMs}, state = {window index, previous window's
 * count, current window's count, the latest grant's offset into its window}. In debt the current
 * count passes the limit (up to twice it) and weighs on the next window as the previous count does.
 * A receipt is {the window, 0}: a refund takes the permits off that window's count, the current one
 * while it lasts, the previous one through the next window, nothing after.
 */
export const SLIDING_WINDOW_COUNTER = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_sliding_window_counter${SIGNATURE}
AS ${QUOTE}
DECLARE
  lim numeric := rule[1];
  w numeric := rule[2];
  idx numeric := ${schema}.ratekeeper_floor_div(now, rule[2]);
  stored numeric := 0;
  stored_previous numeric := 0;
  stored_current numeric := 0;
  stored_offset numeric := 0;
  fresh boolean;
  win numeric;
  elapsed numeric;
  previous numeric;
  current numeric;
  available numeric;
  until_next numeric;
  fits numeric;
  wait numeric;
  into_next numeric;
BEGIN
  forgave := false;
  IF state IS NOT NULL THEN stored := state[1]; stored_previous := state[2]; stored_current := state[3]; stored_offset := state[4]; END IF;
  IF op = 'refund' THEN
    IF receipt[1] = stored AND greatest(idx, stored) <= stored + 1 AND least(permits, stored_current) > 0 THEN
      stored_current := stored_current - least(permits, stored_current);
      next_state := ARRAY[stored, stored_previous, stored_current, stored_offset];
    ELSIF receipt[1] = stored - 1 AND greatest(idx, stored) = stored AND least(permits, stored_previous) > 0 THEN
      stored_previous := stored_previous - least(permits, stored_previous);
      next_state := ARRAY[stored, stored_previous, stored_current, stored_offset];
    END IF;
    permits := 0;
  ELSIF op NOT IN ('acquire', 'reserve', 'peek', 'charge') THEN
    ${UNKNOWN_OP}
  END IF;
  fresh := stored_previous = 0 AND stored_current = 0;
  -- A reading earlier than the latest grant counts as no time passing.
  win := CASE WHEN fresh OR idx > stored THEN idx ELSE stored END;
  elapsed := CASE WHEN fresh OR idx > stored THEN now - win * w ELSE greatest(now - win * w, stored_offset) END;
  previous := CASE WHEN win = stored THEN stored_previous WHEN win = stored + 1 THEN stored_current ELSE 0 END;
  current := CASE WHEN win = stored THEN stored_current ELSE 0 END;
  -- Whole permits left: the limit less the count and the previous window's weight, rounded up.
  available := lim - current - ${schema}.ratekeeper_ceil_div(previous * (w - elapsed), w);
  IF op = 'charge' AND available < permits THEN
    forgave := current + permits > ${bound('lim')};
    current := least(current + permits, ${bound('lim')});
    next_state := ARRAY[win, previous, current, elapsed];
    remaining := greatest(0, lim - current - ${schema}.ratekeeper_ceil_div(previous * (w - elapsed), w));
    retry_after := 0;
    reset_after := CASE WHEN current > 0 THEN ceil(2 * w - elapsed) WHEN previous > 0 THEN ceil(w - elapsed) ELSE 0 END;
    RETURN;
  END IF;
  IF available < permits THEN
    remaining := greatest(0, available);
    until_next := w - elapsed;
    retry_after := NULL;
    -- The weight may be at most fits: previous * (w - elapsed - wait) <= fits * w.
    fits := lim - current - permits;
    IF fits >= 0 AND fits < previous THEN
      wait := until_next - ${schema}.ratekeeper_floor_div(fits * w, previous);
      IF wait < until_next THEN retry_after := ceil(wait); END IF;
    END IF;
    IF retry_after IS NULL THEN
      IF current = 0 THEN
        retry_after := ceil(until_next);
      ELSE
        -- In the next window the count carried over may weigh at most limit - permits.
        into_next := CASE WHEN lim - permits >= current THEN 0 ELSE w - ${schema}.ratekeeper_floor_div((lim - permits) * w, current) END;
        retry_after := ceil(until_next + CASE WHEN into_next < w THEN into_next ELSE w END);
      END IF;
    END IF;
    reset_after := CASE WHEN current > 0 THEN ceil(2 * w - elapsed) WHEN previous > 0 THEN ceil(w - elapsed) ELSE 0 END;
    -- The state now of a key in debt: allowed, none left.
    IF permits = 0 THEN retry_after := 0; END IF;
    RETURN;
  END IF;
  IF op IN ('acquire', 'reserve', 'charge') THEN next_state := ARRAY[win, previous, current + permits, elapsed]; END IF;
  IF op = 'reserve' THEN issued := ARRAY[win, 0]; END IF;
  remaining := available - permits;
  retry_after := 0;
  reset_after := CASE WHEN current + permits > 0 THEN ceil(2 * w - elapsed) WHEN previous > 0 THEN ceil(w - elapsed) ELSE 0 END;
END ${QUOTE};
`;
