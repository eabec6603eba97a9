// In-flight limits (`concurrency`) in PL/pgSQL: the leases a key holds, kept in the `leases` column
// of its row beside the rate's state, so that one row lock makes "100 a minute and 2 at once" one
// decision. Only a limiter with `concurrency` calls these functions: the plain ones (./shell.ts) never
// read the column, so a limiter without an in-flight limit pays nothing for it.
//
// `leases` is {last, latest, then id, permits, end for each lease, earliest end first (ties in grant
// order)}: `last` is the latest reading the in-flight part wrote at (a grant or an extension) and
// `latest` the latest one a grant of the rate and the in-flight part together was made at, as
// `Concurrency` and `Composite` keep them in memory (a reading earlier than either counts as no
// time passing); the ids are the reservations' receipts. Null for a key never leased.
//
// `conc` is {limit, leaseMs}. Each function answers {remaining, retryAfterMs (0: allowed),
// resetAfterMs, limit, proven} (the binding part's limit; for a refusal, the wait its rate and
// block prove, which no release can shorten, else 0), an extension {1} or {0}, a reset {}.

import { MAX_LEASE_MS } from '../../algorithms/concurrency';
import type { Codec } from './codec';
import { QUOTE } from './dollar-quote';
import { BLOCKED, charge, deleteRows, fold, keepReceipt, load, OPERATION_VARIABLES, reclaim, refund, slackOf, store, storedKey, VARIABLES } from './shell';

/** The function of a limiter with `concurrency`: beside `codec`'s rate, or alone (no codec). */
export const leaseFunction = (codec: Codec | undefined): string => `ratekeeper_lease_${codec?.name ?? 'alone'}`;

/** How many leases `leases` holds (SQL). */
const COUNT = '(coalesce(cardinality(lz), 2) - 2) / 3';

/**
 * `ratekeeper_concurrency_peek(lz, x, prm, conc)`: what `Concurrency.peek(x, prm)` answers for the
 * leases `lz`. Leases ended at the reading are not counted; a refusal's retry is the time until
 * enough of them end (an upper bound: a release may come sooner), 2^42 when none would do.
 */
const peekFunction = (schema: string): string => `
CREATE OR REPLACE FUNCTION ${schema}.ratekeeper_concurrency_peek(lz numeric[], x numeric, prm numeric, conc numeric[], OUT answer numeric[])
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS ${QUOTE}
DECLARE
  t numeric := greatest(x, lz[1]);
  held numeric := 0;
  last_end numeric;
  freed numeric := 0;
  free numeric;
  j int;
BEGIN
  FOR j IN 1 .. ${COUNT} LOOP
    IF lz[3 * j + 2] > t THEN
      held := held + lz[3 * j + 1];
      last_end := lz[3 * j + 2];
    END IF;
  END LOOP;
  free := conc[1] - held;
  IF prm > 0 AND prm <= free THEN
    answer := ARRAY[free - prm, 0, least(${MAX_LEASE_MS}, ceil(greatest(last_end - t, conc[2])))];
    RETURN;
  END IF;
  answer := ARRAY[greatest(free, 0), 0, CASE WHEN last_end IS NULL THEN 0 ELSE least(${MAX_LEASE_MS}, ceil(last_end - t)) END];
  IF prm > 0 THEN
    answer[2] := ${MAX_LEASE_MS};
    FOR j IN 1 .. ${COUNT} LOOP
      IF lz[3 * j + 2] > t THEN
        freed := freed + lz[3 * j + 1];
        IF freed >= prm - free THEN
          answer[2] := greatest(1, least(${MAX_LEASE_MS}, ceil(lz[3 * j + 2] - t)));
          EXIT;
        END IF;
      END IF;
    END LOOP;
  END IF;
END ${QUOTE};
`;

/** Puts lease (`id`, `p`, `e`) into `lz` in end order, after those ending at the same time. */
const place = (id: string, p: string, e: string): string => `
        pos := 3 * ${COUNT} + 3;
        WHILE pos > 3 AND lz[pos - 1] > ${e} LOOP pos := pos - 3; END LOOP;
        lz := lz[1 : pos - 1] || ARRAY[${id}, ${p}, ${e}] || lz[pos : cardinality(lz)];`;

/** Sets `j` to the place of lease `receipt` in `lz`, 0 when the key does not hold it. */
const FIND_LEASE = `
      pos := 0;
      FOR j IN 1 .. ${COUNT} LOOP
        IF lz[3 * j] = receipt THEN pos := j; EXIT; END IF;
      END LOOP;`;

/**
 * Forgets the leases ended at `cl`, before a write that makes `cl` the in-flight part's time (a
 * grant, an extension): no later call can count them again, whatever its reading. Any other call
 * leaves them (uncounted): an earlier reading after it must still see them held, as in memory.
 */
const FORGET = `
        pos := 1;
        WHILE pos <= ${COUNT} AND lz[3 * pos + 2] <= cl LOOP pos := pos + 1; END LOOP;
        IF pos > 1 THEN lz := lz[1 : 2] || lz[3 * pos : cardinality(lz)]; END IF;`;

/** Takes lease `pos` out of `lz`. */
const TAKE_OUT = 'lz := lz[1 : 3 * pos - 1] || lz[3 * pos + 3 : cardinality(lz)];';

/**
 * Sets `answer` (and, for a grant, `next`) to `Composite([rate, Concurrency]).peek(cnow, p)`: the
 * binding part is the one with fewer permits (the rate on a tie), a grant when both allow; a
 * refusal's retry the first time both allow together (Composite's `waitFrom`: guesses that at
 * least double, then a bisection), its reset the first time both are as new from then. Alone, the
 * in-flight part's answer as it is. Then the rate's own retry (0 alone): the wait no release can
 * shorten, which a waiting lease gives up on at once when it passes maxWaitMs.
 */
const decide = (schema: string, codec: Codec | undefined, p: string): string => {
  if (codec === undefined) return `
      answer := ${schema}.ratekeeper_concurrency_peek(lz, cnow, ${p}, conc) || ARRAY[conc[1], 0];`;
  // Only a grant's state is kept (in `next`); the state now and the retries read the answer alone.
  const rate = (at: string, permits: string, grant = false) =>
    `SELECT ${grant ? 'd.next, ' : ''}d.answer INTO ${grant ? 'next, ' : ''}ra FROM ${schema}.ratekeeper_${codec.name}_decide(s, ${at}, ${permits}, rule) d;`;
  // Sets `longest` to the longest either part still refuses at `cnow + at`: its retry, or its reset.
  const longestAt = (at: string, permits: string, field: number) => `
          ${rate(`cnow + ${at}`, permits)}
          ca := ${schema}.ratekeeper_concurrency_peek(lz, cnow + ${at}, ${permits}, conc);
          longest := greatest(ra[${field}], ca[${field}]);`;
  // A part's clock may be ahead of the call's (an extension or a settle at a later reading): until
  // the guess passes it, the part answers the same short retry at every guess. So each step is at
  // least twice the last, and once a guess lands where both allow, the first such ms is searched for
  // between the last refusal and it: about 2 * 42 guesses at most, whatever the clocks.
  const waitFrom = (permits: string, field: number) => `
        step := 0;
        refused := wait - 1;${longestAt('wait', permits, field)}
        WHILE longest <> 0 LOOP
          IF wait + longest >= ${MAX_LEASE_MS} THEN
            -- Only a release can make room: the answer of a refusal no time ends.
            wait := ${MAX_LEASE_MS};
            refused := wait - 1;
            EXIT;
          END IF;
          refused := wait + longest - 1;
          step := greatest(longest, 2 * step);
          wait := least(wait + step, ${MAX_LEASE_MS - 1});${longestAt('wait', permits, field)}
        END LOOP;
        WHILE wait - refused > 1 LOOP
          middle := refused + floor((wait - refused) / 2);${longestAt('middle', permits, field)}
          IF longest = 0 THEN wait := middle; ELSE refused := middle; END IF;
        END LOOP;`;
  return `
      ${rate('cnow', p, p !== '0')}
      ca := ${schema}.ratekeeper_concurrency_peek(lz, cnow, ${p}, conc);
      IF ${p} = 0 THEN
        answer := CASE WHEN ca[1] < ra[1] THEN ARRAY[ca[1], 0, 0, conc[1], 0] ELSE ARRAY[ra[1], 0, 0, rule[1], 0] END;
        answer[3] := greatest(ra[3], ca[3]);
      ELSE
        -- What each part has now: an allowing part reports what is left after the request.
        ra[1] := CASE WHEN ra[2] = 0 THEN ra[1] + ${p} ELSE ra[1] END;
        ca[1] := CASE WHEN ca[2] = 0 THEN ca[1] + ${p} ELSE ca[1] END;
        -- The rate's own retry last: a release may end the in-flight part's wait sooner, never it.
        answer := CASE WHEN ca[1] < ra[1] THEN ARRAY[ca[1], 0, 0, conc[1], ra[2]] ELSE ARRAY[ra[1], 0, 0, rule[1], ra[2]] END;
        wait := greatest(ra[2], ca[2]);
        IF wait = 0 THEN
          answer[1] := answer[1] - ${p};
          answer[3] := greatest(ra[3], ca[3]);
        ELSE
          ${waitFrom(p, 2)}
          answer[2] := wait;
          ${waitFrom('0', 3)}
          answer[3] := wait;
          next := NULL;
        END IF;
      END IF;`;
};

/**
 * A lone in-flight limit's row: its own (no previous version wrote one), live until its expiry,
 * with the limit and leaseMs where a rate's row has its rule (never taken for a previous version's row).
 */
const loadAlone = (schema: string): string => `
    IF op = 'peek' THEN
      SELECT ctid, expires_at, blocked_until, leases INTO tid, expires, blocked, lz FROM ${schema}.ratekeeper_state WHERE key = k FOR SHARE;
    ELSE
      SELECT ctid, expires_at, blocked_until, leases INTO tid, expires, blocked, lz FROM ${schema}.ratekeeper_state WHERE key = k FOR UPDATE;
    END IF;
    n := floor(extract(epoch FROM clock_timestamp()) * 1000);
    now := coalesce(clk, n);
    renew := tid IS NULL OR expires <= n;
    IF renew THEN
      blocked := NULL;
      lz := NULL;
    END IF;`;

/**
 * `ratekeeper_lease_<codec>(head, legacy, uk, prm, clk, rule, op, receipt, conc)` (and
 * `ratekeeper_lease_alone`, whose `rule` is {limit, leaseMs, expiry slack}): `op` on one key, as
 * the general function (./shell.ts) does it, with the key's leases:
 *
 * - every call counts only the leases not ended at its reading (a grant or an extension forgets the others);
 * - 'reserve' grants only when the rate and the in-flight part both allow, and holds lease
 *   `receipt` for `prm` permits until `leaseMs` from then;
 * - 'refund' and 'charge' (a settle, naming its reservation) release lease `receipt`, then give back
 *   or charge the rate as without one;
 * - 'extend' holds lease `receipt`, if still held, for `prm` ms from now instead;
 * - 'peek', 'block' and 'reset' as without leases ('reset' drops them); a rule change keeps them;
 * - 'refund' and 'extend' act under the rule the row is counted under, never changing it (see
 *   `load`); a refund then answers that rule's limit and windowMs after its four numbers.
 *
 * Rows expire once every lease has ended (the answer's reset covers the latest end).
 */
const leaseShell = (schema: string, codec: Codec | undefined): string => {
  const table = `${schema}.ratekeeper_state`;
  const key = storedKey('head || uk');
  const rateOps =
    codec === undefined
      ? ''
      : `
      IF op = 'charge' THEN${charge(schema, codec)}
        s := next;
      ELSE
        ${refund(schema, codec)}
      END IF;`;
  return `
CREATE OR REPLACE FUNCTION ${schema}.${leaseFunction(codec)}(head text, legacy text, uk text, prm numeric, clk numeric, rule numeric[], op text, receipt numeric, conc numeric[])
RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  ${VARIABLES}
  ${OPERATION_VARIABLES}
  lz numeric[];
  cnow numeric;
  cl numeric;
  ra numeric[];
  ca numeric[];
  wait numeric;
  longest numeric;
  step numeric;
  refused numeric;
  middle numeric;
  lim numeric;
  proven numeric;
  extended boolean;
BEGIN
  k := ${key};
  IF op = 'reset' THEN
    ${deleteRows(table, codec !== undefined)};
    RETURN '{}';
  END IF;
  LOOP
    ${
      codec === undefined
        ? loadAlone(schema)
        : `IF op = 'peek' THEN
      ${load(schema, codec, 'share', 'general', true)}
    ELSE
      ${load(schema, codec, 'update', 'general', true, "op IN ('refund', 'extend')")}
    END IF;`
    }
    -- The rates and the in-flight part count time from the latest grant of both, the in-flight
    -- part from its own latest write too (ratekeeper_concurrency_peek counts no lease ended by then).
    cnow := greatest(now, lz[2]);
    cl := greatest(cnow, lz[1]);
    next := NULL;
    keep := false;
    extended := false;
    IF op = 'block' THEN
      -- A shorter block never shortens a longer one.
      blocked := greatest(blocked, now + prm);
      keep := true;
    ELSIF op = 'extend' THEN${FORGET}${FIND_LEASE}
      IF pos > 0 THEN
        ra := lz[3 * pos : 3 * pos + 1];
        ${TAKE_OUT}${place('ra[1]', 'ra[2]', 'cl + prm')}
        lz[1] := cl;
        extended := true;
        keep := true;
      END IF;
    ELSIF op IN ('refund', 'charge') THEN
      -- A settle: its in-flight permits are free at once, whatever it keeps on the rate.${FIND_LEASE}
      IF pos > 0 THEN
        ${TAKE_OUT}
        keep := true;
      END IF;${rateOps}
    ELSIF op IN ('reserve', 'peek') THEN${codec?.deficit === undefined ? '' : `
      IF op = 'reserve' THEN ${fold(codec)}
      END IF;`}${decide(schema, codec, 'prm')}
      lim := answer[4];
      proven := answer[5];${BLOCKED}
      answer[4] := lim;
      -- A block proves its end too (no block, or one over: the rate's wait alone).
      answer[5] := greatest(proven, ceil(blocked - now));
      EXIT WHEN op = 'peek';
      IF answer[2] = 0 THEN${codec === undefined ? '' : keepReceipt(codec)}
        lz := coalesce(lz, ARRAY[NULL, NULL]::numeric[]);${FORGET}${place('receipt', 'prm', 'cl + conc[2]')}
        lz[1] := cl;${codec === undefined ? '' : '\n        lz[2] := cnow;'}
        keep := true;
      END IF;
    ELSE
      RAISE EXCEPTION 'ratekeeper: unknown operation %', op;
    END IF;
    IF op <> 'reserve' THEN
      -- The state now (as peek(key, 0) without a block), whose reset the row's expiry covers.${decide(schema, codec, '0')}
    END IF;
    ${store(schema, codec === undefined ? 'rule[3]' : slackOf(codec), ', blocked_until = blocked, receipts = rcpts, leases = lz', 'keep OR ', true)}
  END LOOP;
  ${reclaim(schema, '2')}
  RETURN CASE WHEN op = 'extend' THEN ARRAY[CASE WHEN extended THEN 1 ELSE 0 END] WHEN stayed THEN answer || ARRAY[rule[1], rule[2]] ELSE answer END;
END ${QUOTE};
`;
};

/** Everything in-flight limits need in the database: the in-flight part's peek, and a lease function per codec and alone. */
export const leaseShells = (schema: string, codecs: readonly Codec[]): string =>
  peekFunction(schema) + [...codecs, undefined].map((codec) => leaseShell(schema, codec)).join('');
