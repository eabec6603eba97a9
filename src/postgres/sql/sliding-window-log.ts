import { bound, type Codec } from './codec';

// rule = {limit, windowMs}, state = {t1, n1, t2, n2, ...}: the times of the grants still in the
// window (oldest first) and how many permits each took. In debt the live permits pass the limit
// (up to the usage bound), the charge logged now. A receipt marks the grant's time.

/**
 * `t`, the reading (one earlier than the newest grant counts as no time passing, which keeps the
 * log in order); `first_live`, the first entry still in the window; `live`, the permits they hold.
 */
const LIVE = `entries := coalesce(cardinality(s), 0) / 2;
    newest := s[2 * entries - 1];
    t := greatest(now, newest);
    first_live := 1;
    live := 0;
    FOR e IN 1 .. entries LOOP
      IF s[2 * e - 1] <= t - rule[2] THEN
        first_live := e + 1;
      ELSE
        live := live + s[2 * e];
      END IF;
    END LOOP;`;

const DECLARE = 'entries int; t numeric; newest numeric; first_live int; live numeric; e int;';

export const slidingWindowLog: Codec = {
  name: 'sliding_window_log',
  ruleArgs: ({ limit, windowMs }) => [limit, windowMs],
  ruleOf: (limit, windowMs) => `ARRAY[${limit}, ${windowMs}]`,
  decide: {
    declare: `${DECLARE} rank numeric; retry numeric;`,
    body: `
    ${LIVE}
    IF live + prm > rule[1] THEN
      -- The request fits once the (live + permits - limit)-th live permit has left.
      rank := live + prm - rule[1];
      retry := 0;
      FOR e IN first_live .. entries LOOP
        rank := rank - s[2 * e];
        IF rank <= 0 THEN
          retry := ceil(s[2 * e - 1] + rule[2] - t);
          EXIT;
        END IF;
      END LOOP;
      next := NULL;
      answer := ARRAY[greatest(0, rule[1] - live), retry, ceil(newest + rule[2] - t)];
    ELSE
      IF entries >= first_live AND newest = t THEN
        next := s[2 * first_live - 1 : 2 * entries - 1] || (s[2 * entries] + prm);
      ELSE
        next := coalesce(s[2 * first_live - 1 : 2 * entries], '{}') || ARRAY[t, prm];
      END IF;
      -- A grant, logged now, leaves at now + windowMs: from then on the key is as new. The state
      -- now (no permits) is as new once its newest grant leaves, at least 1 ms away.
      answer := CASE WHEN prm > 0 THEN ARRAY[rule[1] - live - prm, 0, ceil(rule[2])]
        ELSE ARRAY[rule[1] - live, 0, CASE WHEN live = 0 THEN 0 ELSE greatest(1, ceil(newest + rule[2] - t)) END] END;
    END IF;`,
  },
  charge: {
    declare: `${DECLARE} rank numeric; room numeric; logged numeric;`,
    body: `
    ${LIVE}
    forgave := live + prm > ${bound('rule[1]')};
    logged := least(prm, ${bound('rule[1]')});
    -- Past the bound the oldest permits are forgiven: they would have left first, so spending more
    -- never leaves a key better off. rank: how many of them, taken from the oldest entries.
    room := least(live, ${bound('rule[1]')} - logged);
    rank := live - room;
    next := '{}';
    FOR e IN first_live .. entries LOOP
      IF rank >= s[2 * e] THEN
        rank := rank - s[2 * e];
      ELSE
        next := next || ARRAY[s[2 * e - 1], s[2 * e] - rank];
        rank := 0;
      END IF;
    END LOOP;
    IF cardinality(next) > 0 AND newest = t THEN
      next[cardinality(next)] := next[cardinality(next)] + logged;
    ELSE
      next := next || ARRAY[t, logged];
    END IF;`,
  },
  refund: {
    declare: 'entries int := coalesce(cardinality(s), 0) / 2; e int;',
    // Only from the grant logged at the receipt's time, while it is in the window; an entry left
    // with none goes (a log left empty is a new key's).
    body: `
    IF entries > 0 AND mark + rule[2] > greatest(now, s[2 * entries - 1]) AND prm > 0 THEN
      FOR e IN 1 .. entries LOOP
        CONTINUE WHEN s[2 * e - 1] <> mark;
        IF s[2 * e] > prm THEN
          next := s;
          next[2 * e] := s[2 * e] - prm;
        ELSE
          next := s[1 : 2 * e - 2] || s[2 * e + 1 : 2 * entries];
        END IF;
        EXIT;
      END LOOP;
    END IF;`,
  },
  used: {
    declare: DECLARE,
    body: `
    ${LIVE}
    used := live;`,
  },
  mark: 'next[cardinality(next) - 1]',
};
