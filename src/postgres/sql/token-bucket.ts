import { scaledUnits } from '../../algorithms/token-bucket';
import { DEBT_LIMITS } from '../../store/constants';
import { ceilDiv, type Codec, floorDiv } from './codec';

// rule = {limit, windowMs, perMs, perToken}: the in-memory bucket's own scaled units
// (src/algorithms/token-bucket.ts), so both decide alike; the capacity is limit × perToken.
// state = {units left, the time they were counted at}. In debt the units go below zero, one full
// bucket at most. numeric is exact at every size, so the wide rules (a capacity past 2^52 units)
// need no representation of their own here.

/** The units held at `now`: refilled since the state was counted, up to the capacity (a new key's bucket is full). */
const REFILL = `t := greatest(now, s[2]);
  capacity := rule[1] * rule[4];
  units := least(coalesce(s[1] + (t - s[2]) * rule[3], capacity), capacity);`;

const DECLARE = 't numeric; capacity numeric; units numeric;';

/** Token bucket, and leaky bucket (the same law in memory). */
export const tokenBucket: Codec = {
  name: 'token_bucket',
  ruleArgs: (rule) => {
    const { perMs, perToken } = scaledUnits(rule);
    return [rule.limit, rule.windowMs, perMs, perToken];
  },
  ruleOf: (limit, windowMs) => `ARRAY[${limit}, ${windowMs}, ${limit} / gcd(${limit}, ${windowMs}), ${windowMs} / gcd(${limit}, ${windowMs})]`,
  decide: {
    declare: `${DECLARE} cost numeric;`,
    body: `
    -- A reading earlier than the last one counts as no time passing.
    ${REFILL}
    cost := prm * rule[4];
    IF units >= cost THEN
      units := units - cost;
      next := ARRAY[units, t];
      answer := ARRAY[${floorDiv('units', 'rule[4]')}, 0, ${ceilDiv('capacity - units', 'rule[3]')}];
    ELSE
      next := NULL;
      -- In debt (after a charge) the units are below zero: none remaining.
      answer := ARRAY[greatest(0, ${floorDiv('units', 'rule[4]')}), ${ceilDiv('cost - units', 'rule[3]')}, ${ceilDiv('capacity - units', 'rule[3]')}];
    END IF;`,
  },
  charge: {
    declare: DECLARE,
    body: `
    ${REFILL}
    units := units - prm * rule[4];
    forgave := units < -${DEBT_LIMITS} * capacity;
    next := ARRAY[greatest(units, -${DEBT_LIMITS} * capacity), t];`,
  },
  refund: {
    declare: DECLARE,
    // \`mark\` is the most the receipt may give back, in units (the shell's suffix minimum): never
    // more than the deficit now, so the bucket never passes its capacity. The refill to now is
    // stored even when nothing is given, as in memory: a later reading behind it is no time passing.
    body: `
    ${REFILL}
    next := ARRAY[units + least(prm * rule[4], mark), t];`,
  },
  used: {
    declare: DECLARE,
    body: `
    ${REFILL}
    used := ${ceilDiv('capacity - units', 'rule[4]')};`,
  },
  mark: '(rule[1] * rule[4] - next[1])',
  deficit: '(rule[1] * rule[4] - least(coalesce(s[1] + (greatest(now, s[2]) - s[2]) * rule[3], rule[1] * rule[4]), rule[1] * rule[4]))',
};
