// The five algorithms as PL/pgSQL state codecs: each is a pure function from (stored state, now,
// permits, rule, operation) to (state to store, or null to store nothing; remaining, retryAfterMs,
// resetAfterMs), the operations of src/algorithms in the same order, in `numeric`: exact for every
// rule of the domain (limit × windowMs passes bigint's range), so each decides exactly as its
// in-memory twin given the same clock readings. A null state is a key never seen. `rule` holds the
// numbers of `ruleArgs` in src/postgres/plans.ts. The operation is 'acquire' today; the key
// operations (peek, charge, ...) are further operations of the same codecs.

/** `floorDiv` and `ceilDiv` of src/core/exact.ts: `div` truncates, one compare corrects it. */
export const DIVISION = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_floor_div(n numeric, d numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT CASE WHEN div(n, d) * d > n THEN div(n, d) - 1 ELSE div(n, d) END $$;

CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_ceil_div(n numeric, d numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT CASE WHEN div(n, d) * d < n THEN div(n, d) + 1 ELSE div(n, d) END $$;
`;

const SIGNATURE = `(state numeric[], now numeric, permits numeric, rule numeric[], op text,
  OUT next_state numeric[], OUT remaining numeric, OUT retry_after numeric, OUT reset_after numeric)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE`;

const ONLY_ACQUIRE = `IF op <> 'acquire' THEN RAISE EXCEPTION 'ratekeeper: unknown operation %', op; END IF;`;

/**
 * Token bucket (and leaky bucket) in scaled units: rule = {limit, perMs, perToken}, state = {units
 * left, time they were counted at}.
 */
export const TOKEN_BUCKET = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_token_bucket${SIGNATURE}
AS $$
DECLARE
  per_ms numeric := rule[2];
  per_token numeric := rule[3];
  capacity numeric := rule[1] * rule[3];
  units numeric := capacity;
  last numeric := now;
  cost numeric := permits * rule[3];
BEGIN
  ${ONLY_ACQUIRE}
  IF state IS NOT NULL THEN units := state[1]; last := state[2]; END IF;
  -- A reading earlier than the last one counts as no time passing.
  IF now < last THEN now := last; END IF;
  units := least(units + (now - last) * per_ms, capacity);
  IF units < cost THEN
    remaining := ${schema}.ratekeeper_floor_div(units, per_token);
    retry_after := ${schema}.ratekeeper_ceil_div(cost - units, per_ms);
    reset_after := ${schema}.ratekeeper_ceil_div(capacity - units, per_ms);
    RETURN;
  END IF;
  units := units - cost;
  next_state := ARRAY[units, now];
  remaining := ${schema}.ratekeeper_floor_div(units, per_token);
  retry_after := 0;
  reset_after := ${schema}.ratekeeper_ceil_div(capacity - units, per_ms);
END $$;
`;

/** Fixed window: rule = {limit, windowMs}, state = {window index, count in it}. */
export const FIXED_WINDOW = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_fixed_window${SIGNATURE}
AS $$
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
  ${ONLY_ACQUIRE}
  IF state IS NOT NULL THEN stored := state[1]; count := state[2]; END IF;
  -- A reading from an earlier window than the stored one counts as no time passing.
  win := CASE WHEN current > stored OR count = 0 THEN current ELSE stored END;
  now := greatest(now, win * w);
  used := CASE WHEN win = stored THEN count ELSE 0 END;
  until_next := ceil((win + 1) * w - now);
  reset_after := until_next;
  IF used + permits > lim THEN
    remaining := lim - used;
    retry_after := until_next;
    RETURN;
  END IF;
  next_state := ARRAY[win, used + permits];
  remaining := lim - used - permits;
  retry_after := 0;
END $$;
`;

/**
 * Sliding window log, one entry per grant: rule = {limit, windowMs}, state = {t1, n1, t2, n2, ...},
 * the times of the grants still in the window (oldest first) and how many permits each took.
 */
export const SLIDING_WINDOW_LOG = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_sliding_window_log${SIGNATURE}
AS $$
DECLARE
  lim numeric := rule[1];
  w numeric := rule[2];
  entries int := coalesce(cardinality(state), 0) / 2;
  newest numeric;
  expired numeric := 0;
  first_live int := 1;
  live numeric := 0;
  rank numeric;
  i int;
BEGIN
  ${ONLY_ACQUIRE}
  IF entries > 0 THEN
    newest := state[2 * entries - 1];
    -- A reading earlier than the newest hit counts as no time passing, which keeps the log in order.
    IF now < newest THEN now := newest; END IF;
  END IF;
  FOR i IN 1 .. entries LOOP
    IF state[2 * i - 1] <= now - w THEN
      expired := expired + state[2 * i];
      first_live := i + 1;
    ELSE
      live := live + state[2 * i];
    END IF;
  END LOOP;
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
    remaining := lim - live;
    reset_after := ceil(newest + w - now);
    RETURN;
  END IF;
  IF entries >= first_live AND state[2 * entries - 1] = now THEN
    next_state := state[2 * first_live - 1 : 2 * entries - 1] || (state[2 * entries] + permits);
  ELSE
    next_state := coalesce(state[2 * first_live - 1 : 2 * entries], '{}') || ARRAY[now, permits];
  END IF;
  remaining := lim - live - permits;
  retry_after := 0;
  -- The newest hit, now, leaves at now + windowMs: from then on the key is as new.
  reset_after := ceil(w);
END $$;
`;

/**
 * Sliding window counter: rule = {limit, windowMs}, state = {window index, previous window's
 * count, current window's count, the latest grant's offset into its window}.
 */
export const SLIDING_WINDOW_COUNTER = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_sliding_window_counter${SIGNATURE}
AS $$
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
  ${ONLY_ACQUIRE}
  IF state IS NOT NULL THEN stored := state[1]; stored_previous := state[2]; stored_current := state[3]; stored_offset := state[4]; END IF;
  fresh := stored_previous = 0 AND stored_current = 0;
  -- A reading earlier than the latest grant counts as no time passing.
  win := CASE WHEN fresh OR idx > stored THEN idx ELSE stored END;
  elapsed := CASE WHEN fresh OR idx > stored THEN now - win * w ELSE greatest(now - win * w, stored_offset) END;
  previous := CASE WHEN win = stored THEN stored_previous WHEN win = stored + 1 THEN stored_current ELSE 0 END;
  current := CASE WHEN win = stored THEN stored_current ELSE 0 END;
  -- Whole permits left: the limit less the count and the previous window's weight, rounded up.
  available := lim - current - ${schema}.ratekeeper_ceil_div(previous * (w - elapsed), w);
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
    RETURN;
  END IF;
  next_state := ARRAY[win, previous, current + permits, elapsed];
  remaining := available - permits;
  retry_after := 0;
  reset_after := ceil(2 * w - elapsed);
END $$;
`;
