import { bound, ceilDiv, type Codec, floorDiv } from './codec';

// rule = {limit, windowMs}, state = {window index, previous window's count, current window's count,
// the latest grant's offset into its window}. In debt the current count passes the limit (up to
// the usage bound) and weighs on the next window as the previous count does. A receipt marks the
// window it was counted in: a refund takes the permits off that window's count, the current one
// while it lasts, the previous one through the next window, nothing after.

/**
 * The window `now` counts in, how far into it, the two counts that weigh there, and the whole
 * permits left: the limit less the count and the previous window's weight, rounded up. A reading
 * earlier than the latest grant counts as no time passing; a key with nothing counted starts at now.
 */
const POSITION = `idx := ${floorDiv('now', 'rule[2]')};
    IF s IS NULL OR (s[2] = 0 AND s[3] = 0) OR idx > s[1] THEN
      win := idx;
      elapsed := now - win * rule[2];
    ELSE
      win := s[1];
      elapsed := greatest(now - win * rule[2], s[4]);
    END IF;
    previous := CASE WHEN win = s[1] THEN s[2] WHEN win = s[1] + 1 THEN s[3] ELSE 0 END;
    current := CASE WHEN win = s[1] THEN s[3] ELSE 0 END;
    available := rule[1] - current - ${ceilDiv('previous * (rule[2] - elapsed)', 'rule[2]')};`;

const DECLARE = 'idx numeric; win numeric; elapsed numeric; previous numeric; current numeric; available numeric;';

export const slidingWindowCounter: Codec = {
  name: 'sliding_window_counter',
  ruleArgs: ({ limit, windowMs }) => [limit, windowMs],
  ruleOf: (limit, windowMs) => `ARRAY[${limit}, ${windowMs}]`,
  decide: {
    declare: `${DECLARE} until_next numeric; fits numeric; wait numeric; retry numeric;`,
    body: `
    ${POSITION}
    IF available >= prm THEN
      next := ARRAY[win, previous, current + prm, elapsed];
      answer := ARRAY[available - prm, 0,
        CASE WHEN current + prm > 0 THEN ceil(2 * rule[2] - elapsed) WHEN previous > 0 THEN ceil(rule[2] - elapsed) ELSE 0 END];
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
  },
  charge: {
    declare: DECLARE,
    body: `
    ${POSITION}
    -- In debt, what passes the bound is dropped (and voids the receipts: the shell's business).
    forgave := available < prm AND current + prm > ${bound('rule[1]')};
    next := ARRAY[win, previous, CASE WHEN available < prm THEN least(current + prm, ${bound('rule[1]')}) ELSE current + prm END, elapsed];`,
  },
  refund: {
    declare: 'idx numeric;',
    body: `
    idx := greatest(${floorDiv('now', 'rule[2]')}, s[1]);
    IF mark = s[1] AND idx <= s[1] + 1 AND least(prm, s[3]) > 0 THEN
      next := ARRAY[s[1], s[2], s[3] - least(prm, s[3]), s[4]];
    ELSIF mark = s[1] - 1 AND idx = s[1] AND least(prm, s[2]) > 0 THEN
      next := ARRAY[s[1], s[2] - least(prm, s[2]), s[3], s[4]];
    END IF;`,
  },
  used: {
    declare: 'idx numeric;',
    // Read as decide reads it: a reading earlier than the latest grant counts as no time passing.
    body: `
    idx := ${floorDiv('now', 'rule[2]')};
    IF s IS NULL OR idx >= s[1] + 2 OR s[2] + s[3] = 0 THEN
      used := 0;
    ELSIF idx > s[1] THEN
      used := ${ceilDiv('s[3] * (rule[2] - (now - idx * rule[2]))', 'rule[2]')};
    ELSE
      used := s[3] + ${ceilDiv('s[2] * (rule[2] - greatest(now - s[1] * rule[2], s[4]))', 'rule[2]')};
    END IF;`,
  },
  mark: 'next[1]',
};
