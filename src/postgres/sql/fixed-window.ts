import { bound, type Codec, floorDiv } from './codec';

// rule = {limit, windowMs}, state = {window index, count in it}. In debt the count passes the limit
// (up to the usage bound) until the window ends. A receipt marks the window it was counted in.

/** The window `now` counts in and what it holds: a reading from an earlier window than the stored one counts as no time passing. */
const WINDOW = `win := ${floorDiv('now', 'rule[2]')};
    IF s[2] <> 0 AND win <= s[1] THEN win := s[1]; END IF;
    used := CASE WHEN win = s[1] THEN s[2] ELSE 0 END;`;

export const fixedWindow: Codec = {
  name: 'fixed_window',
  ruleArgs: ({ limit, windowMs }) => [limit, windowMs],
  ruleOf: (limit, windowMs) => `ARRAY[${limit}, ${windowMs}]`,
  decide: {
    declare: 'win numeric; used numeric; until_next numeric;',
    body: `
    ${WINDOW}
    until_next := ceil((win + 1) * rule[2] - greatest(now, win * rule[2]));
    IF used + prm <= rule[1] THEN
      next := ARRAY[win, used + prm];
      answer := ARRAY[rule[1] - used - prm, 0, CASE WHEN used + prm = 0 THEN 0 ELSE until_next END];
    ELSE
      next := NULL;
      -- In debt (after a charge) the count passes the limit: none remaining.
      answer := ARRAY[greatest(0, rule[1] - used), until_next, until_next];
    END IF;`,
  },
  charge: {
    declare: 'win numeric; used numeric;',
    body: `
    ${WINDOW}
    -- What passes the bound is dropped (and voids the receipts: the shell's business).
    forgave := used + prm > ${bound('rule[1]')};
    next := ARRAY[win, least(used + prm, ${bound('rule[1]')})];`,
  },
  refund: {
    declare: '',
    // Only from the window the permits were counted in, and only while it lasts.
    body: `
    IF mark = s[1] AND ${floorDiv('now', 'rule[2]')} <= s[1] AND least(prm, s[2]) > 0 THEN next := ARRAY[s[1], s[2] - least(prm, s[2])]; END IF;`,
  },
  used: {
    declare: '',
    // A reading from an earlier window than the stored one counts as no time passing, as in decide.
    body: `
    used := CASE WHEN s IS NULL OR ${floorDiv('now', 'rule[2]')} > s[1] THEN 0 ELSE s[2] END;`,
  },
  mark: 'next[1]',
};
