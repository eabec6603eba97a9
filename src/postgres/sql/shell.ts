// The shell: everything about a key's row that is not an algorithm, written once and printed for
// each codec (./codec.ts). Per codec, three functions:
//
// - `ratekeeper_decide_<codec>`: every operation (acquire, peek, charge, reserve, refund, block,
//   reset) on keys in turn, through the codec's functions;
// - `ratekeeper_acquire_one_<codec>` and `ratekeeper_acquire_batch_<codec>`: the fast path of
//   `tryAcquire`, alone in its round trip or in a batch, with the codec's `decide` written inline
//   (an SQL function call in PL/pgSQL costs more than the arithmetic), deciding and storing exactly
//   as the general function does (test/postgres/fast-path.test.ts).
//
// A step on one key: lock its row (`SELECT ... FOR UPDATE`; a peek `FOR SHARE`), and only then read
// the clock, so whoever holds the lock next reads a later time; take the row's state when it is
// ours and live; else adopt what the previous version stored for the key under the call's rule
// (its row key held the rule: D3 of issue 24), deleting that row; carry the usage over when the row
// was counted under another rule than the call's (D2); let the codec decide; refuse a blocked key
// whatever it says; keep the receipts (D4); store the state and the row's expiry.
//
// Why PL/pgSQL statements rather than one SQL statement: a call's cost is the statements it
// executes and the expressions it evaluates, each set up again in every transaction, and a single
// CTE statement cost more than this step (bench/HISTORY.md). Each function is called with a
// one-line unnamed statement (safe behind PgBouncer in transaction mode), and PL/pgSQL keeps its
// statements' plans for the session.

import { Rule } from '../../core/rule';
import { expirySlackMs, MAX_RECEIPTS, MAX_SAFE } from '../../store/constants';
import { codecFunctions, type Codec } from './codec';
import { QUOTE } from './dollar-quote';

/**
 * The longest row key, in UTF-8 bytes, stored as it is. A B-tree entry holds at most 2704 bytes, so
 * a longer key, stored as it is, failed its every call. Longer ones become `sha256/` and the SHA-256
 * of the whole row key in hex: no plain row key can be that, since every one holds a `:`
 * (`prefix + algorithm + ':' + ...`) and the digest's form none.
 */
export const LONG_KEY_BYTES = 2000;

/** What an over-long row key held in the SQL expression `key` is stored as (see {@link LONG_KEY_BYTES}). */
const hashedKey = (key: string): string => `'sha256/' || encode(sha256(convert_to(${key}, 'UTF8')), 'hex')`;

/** The row key stored for the key held in the SQL expression `key` (see {@link LONG_KEY_BYTES}). */
export const storedKey = (key: string): string => `CASE WHEN octet_length(${key}) > ${LONG_KEY_BYTES} THEN ${hashedKey(key)} ELSE ${key} END`;

/** The row key the previous version kept `uk` under (DESIGN-24 D3): its rule between `legacy` and the key. */
const PREVIOUS_ROW_KEY = `legacy || rule[1] || '/' || rule[2] || ':' || uk`;

/**
 * Deletes the key's row `k` (a reset) and, unless `previous` is false (no previous version wrote
 * such rows), the previous version's row for the call's rule: a reset leaves nothing to adopt.
 */
export const deleteRows = (table: string, previous = true): string =>
  `DELETE FROM ${table} WHERE key = k${previous ? ` OR (key = ${storedKey(PREVIOUS_ROW_KEY)} AND rule_limit IS NULL)` : ''}`;

/**
 * Sets `variable` to the row key stored for `key`, as statements: {@link storedKey} would build
 * `key` three times, and each decision's expressions are set up again in its transaction
 * (bench/HISTORY.md).
 */
const setStoredKey = (variable: string, key: string): string => `${variable} := ${key};
    IF octet_length(${variable}) > ${LONG_KEY_BYTES} THEN ${variable} := ${hashedKey(variable)}; END IF;`;

/** What a batch answers, three times, for a key whose row another transaction held: undecided, to be sent again alone. */
export const SKIPPED = -1;

/** How many numbers a call's rule is for `codec`: its `ruleArgs`, then the expiry slack. */
export const ruleLength = (codec: Codec): number => codec.ruleArgs(new Rule(1, 1)).length + 1;

/** The expiry slack in a call's rule for `codec`: its last number. */
export const slackOf = (codec: Codec): string => `rule[${ruleLength(codec)}]`;

/** The general function of `codec`, `ratekeeper_decide_token_bucket` and so on. */
export const decideFunction = (codec: Codec): string => `ratekeeper_decide_${codec.name}`;

/** The function deciding one key with `codec`. */
export const oneKeyFunction = (codec: Codec): string => `ratekeeper_acquire_one_${codec.name}`;

/** The function deciding a batch of keys with `codec`. */
export const manyKeysFunction = (codec: Codec): string => `ratekeeper_acquire_batch_${codec.name}`;

/** The variables every step uses, beside its codec's own. */
export const VARIABLES = `k text; lk text; tid tid; ltid tid; s numeric[]; ls numeric[]; expires bigint; le bigint; blocked numeric; lb numeric;
  rl numeric; rw numeric; rcpts numeric[]; carried numeric; renew boolean; n bigint; now numeric; answer numeric[]; next numeric[]; inserted int := 0;`;

/** How a step takes its key's row: to write it, to read it (a peek), or to write it unless another transaction holds it. */
export type Lock = 'update' | 'share' | 'skip';

/** Ends the step undecided (a null `answer`) when the row `where` selects exists but another transaction holds it. */
const heldBy = (table: string, where: string) => `
      IF NOT FOUND THEN
        -- Absent, or held: a held row is still seen without a lock.
        PERFORM FROM ${table} WHERE ${where};
        IF FOUND THEN
          answer := NULL;
          EXIT;
        END IF;
      END IF;`;

/**
 * Reads the key `k` (user key `uk`) for the call's `rule` at `clk` (null: the server's clock) into
 * `s`, `blocked` and `rcpts`, with `renew` set when the row is not to be written as it stands.
 *
 * - An absent or expired row is a key never seen, block and receipts included; so is a row without
 *   a rule, which only the previous version writes (the row key of another key, under that
 *   layout). When the key has no row of this layout (absent, or that rule-less row), the previous
 *   version's row for this key under this rule, when live, gives its state and block (receipts
 *   are not carried: no reservation outlives its process) and is deleted, in this transaction; a
 *   peek reads it and deletes nothing. An expired row of this layout skips that look: the call
 *   that wrote it had already looked (and deleted what it found), so the key was taken over.
 * - A row counted under another rule than the call's: its usage now under that rule, debt
 *   included, is charged to a fresh state under the call's (as `KeyedRateLimiter.reconfigure`
 *   carries it, up to the new rule's debt bound); the block stays, the receipts go. Unless the SQL
 *   condition `stays` holds (a refund, an extension: sent under their reservation's rule, they
 *   never change a key's rule): then the step goes on under the row's rule, set in `rule`, with
 *   `stayed` set, and nothing is carried over.
 *
 * On the fast path (a decision) a window's receipts are left unread (`rcpts` null: it neither
 * reads nor changes them) and a bucket's are folded here (see `fold`).
 */
export const load = (schema: string, codec: Codec, lock: Lock, path: 'general' | 'fast' = 'general', leases = false, stays?: string): string => {
  const table = `${schema}.ratekeeper_state`;
  // The fast path reads a window's receipts never, a bucket's to fold them; the general path reads them always and folds per operation.
  const receipts = path === 'general' || codec.deficit !== undefined;
  const folds = path === 'fast' && codec.deficit !== undefined;
  const write = lock !== 'share';
  const rowLock = { update: ' FOR UPDATE', share: ' FOR SHARE', skip: ' FOR UPDATE SKIP LOCKED' }[lock];
  const legacyWhere = 'key = lk AND rule_limit IS NULL';
  const legacyRead = `SELECT ctid, state, expires_at, blocked_until INTO ltid, ls, le, lb FROM ${table} WHERE ${legacyWhere}`;
  // A batch never waits: it reads the row unlocked first, since most keys have none and one probe
  // settles that (a locking read that skips a held row needs a second probe to tell held from
  // absent); a row found is then locked, or, held by another transaction, leaves the key undecided.
  const lookup =
    lock === 'skip'
      ? `${legacyRead};
        IF FOUND THEN
          ${legacyRead} FOR UPDATE SKIP LOCKED;
          IF NOT FOUND THEN
            answer := NULL;
            EXIT;
          END IF;
        END IF;`
      : `${legacyRead}${lock === 'update' ? ' FOR UPDATE' : ''};`;
  return `
    SELECT ctid, state, expires_at, blocked_until, rule_limit, rule_window_ms${receipts ? ', receipts' : ''}${leases ? ', leases' : ''} INTO tid, s, expires, blocked, rl, rw${receipts ? ', rcpts' : ''}${leases ? ', lz' : ''}
      FROM ${table} WHERE key = k${rowLock};${lock === 'skip' ? heldBy(table, 'key = k') : ''}
    n := floor(extract(epoch FROM clock_timestamp()) * 1000);
    now := coalesce(clk, n);
    -- One test on the usual path: a live row of ours, counted under the call's rule${folds ? ', no receipt held' : ''}.
    IF expires > n AND rl = rule[1] AND rw = rule[2]${folds ? ' AND rcpts IS NULL' : ''} THEN
      renew := false;${folds ? `
    ELSIF expires > n AND rl = rule[1] AND rw = rule[2] THEN
      renew := false;${fold(codec)}` : ''}
    ELSIF tid IS NULL OR expires <= n OR rl IS NULL THEN
      renew := true;
      s := NULL;
      blocked := NULL;
      rcpts := NULL;${leases ? '\n      lz := NULL;' : ''}
      -- No rule: absent (every column null) or the previous layout's. An expired row of ours was
      -- written by a call that had looked: most expired keys (a busy log's) skip the look.
      IF rl IS NULL THEN
        ${setStoredKey('lk', PREVIOUS_ROW_KEY)}
        ${lookup}
        IF le > n THEN
          s := ls;
          blocked := lb;
        END IF;${write ? `\n        IF ltid IS NOT NULL THEN DELETE FROM ${table} WHERE ctid = ltid; END IF;` : ''}
      END IF;${
      stays === undefined
        ? ''
        : `
    ELSIF ${stays} THEN
      renew := false;
      stayed := true;
      rule := ${codec.ruleOf('rl', 'rw')} || least(floor(rw / 4), ${expirySlackMs(MAX_SAFE)});`
    }
    ELSE
      renew := true;
      rcpts := NULL;${leases ? `\n      -- The leases stay, each ending when it would have; the rates' composite starts over.\n      IF lz IS NOT NULL THEN lz[2] := NULL; END IF;` : ''}
      IF cardinality(s) > 0 THEN
        SELECT u.used INTO carried FROM ${schema}.ratekeeper_${codec.name}_used(s, now, ${codec.ruleOf('rl', 'rw')}) u;
        s := NULL;
        IF carried > 0 THEN SELECT c.next INTO s FROM ${schema}.ratekeeper_${codec.name}_charge(NULL, now, least(carried, ${MAX_SAFE}), rule) c; END IF;
      END IF;
    END IF;`;
};

/**
 * A bucket's receipts hold, each, the lowest deficit over its segment of time (from its grant to
 * the next one's, the last to now); before every event but a peek the last takes in the deficit
 * now. Between events only refill moves the deficit, downwards, so the lowest is always met at one.
 * A full bucket drops them all, as memory does: every refund would give nothing.
 */
export const fold = (codec: Codec): string =>
  codec.deficit === undefined
    ? ''
    : `
    IF rcpts IS NOT NULL THEN
      rcpts[cardinality(rcpts)] := least(rcpts[cardinality(rcpts)], ${codec.deficit});
      IF ${codec.deficit} = 0 THEN rcpts := NULL; END IF;
    END IF;`;

/** A blocked key is refused whatever the codec says, writing nothing, until both the block and the algorithm allow. */
export const BLOCKED = `
    IF blocked > now THEN
      next := NULL;
      answer := ARRAY[0, greatest(ceil(blocked - now), answer[2]), greatest(ceil(blocked - now), answer[3])];
    END IF;`;

/**
 * Stores `next` (nothing when null, unless the step took the key over from an old row or rule,
 * then what it read; or the SQL `keep` says to store the row as it is), with the row's expiry:
 * until the key is as new (its debt repaid, its block over), plus the slack (the rule's last
 * number), rounded up to a whole second and never moved earlier (see the table in ./schema.ts). A missing row is inserted; when another caller inserted
 * it meanwhile, the step runs again on that row. `columns`: what a row kept as it stands may change.
 */
export const store = (schema: string, slack: string, columns: string, keep = '', leases = false): string => {
  const table = `${schema}.ratekeeper_state`;
  const until = `ceil((n + greatest(answer[3], blocked - now) + ${slack}) / 1000.0) * 1000`;
  return `
    IF next IS NULL THEN
      EXIT WHEN NOT (${keep}renew AND (s IS NOT NULL OR blocked IS NOT NULL));
      next := s;
    END IF;
    IF NOT renew THEN
      UPDATE ${table} SET state = next, expires_at = greatest(expires_at, ${until})${columns} WHERE ctid = tid;
      EXIT;
    ELSIF tid IS NOT NULL THEN
      UPDATE ${table} SET state = next, expires_at = greatest(expires_at, ${until}), blocked_until = blocked, rule_limit = rule[1], rule_window_ms = rule[2], receipts = rcpts${leases ? ', leases = lz' : ''}
      WHERE ctid = tid;
      EXIT;
    END IF;
    INSERT INTO ${table} (key, state, expires_at, blocked_until, rule_limit, rule_window_ms, receipts${leases ? ', leases' : ''}) VALUES (k, next, ${until}, blocked, rule[1], rule[2], rcpts${leases ? ', lz' : ''})
    ON CONFLICT (key) DO NOTHING;
    IF FOUND THEN
      inserted := inserted + 1;
      EXIT;
    END IF;`;
};

/** The variables of a function taking keys, permits, nows and rules (one for all, or one per key), and the reply it builds. */
const BATCH_VARIABLES = `reply numeric[] := array_fill(0::numeric, ARRAY[3 * cardinality(keys)]);
  rule numeric[] := rules;
  i int;
  uk text;
  prm numeric;
  clk numeric;`;

/**
 * Takes call `i` of the batch: its key, row key, permits, clock reading and rule. Keys are taken in
 * key order whatever the order asked (the FOREACH), so two batches sharing keys wait for each other
 * instead of deadlocking; calls on one key stay in the order asked.
 */
const takeCall = (codec: Codec) => {
  const L = ruleLength(codec);
  return `uk := keys[i];
    ${setStoredKey('k', 'head || uk')}
    prm := permits[i];
    clk := nows[i];
    IF cardinality(rules) > ${L} THEN rule := rules[${L} * i - ${L - 1} : ${L} * i]; END IF;`;
};

/** Call order for a batch: its indexes sorted by key, then by position. */
const BY_KEY = 'ARRAY(SELECT o FROM unnest(keys) WITH ORDINALITY AS u(key, o) ORDER BY u.key, u.o)';

/** Deletes up to `count` expired rows that no one holds (SKIP LOCKED): it never waits, so it runs last. */
export const reclaim = (schema: string, count: string): string => `
  IF inserted > 0 THEN
    DELETE FROM ${schema}.ratekeeper_state WHERE ctid = ANY (ARRAY(
      SELECT ctid FROM ${schema}.ratekeeper_state WHERE expires_at <= n ORDER BY expires_at LIMIT ${count} FOR UPDATE SKIP LOCKED));
  END IF;`;

/** One `tryAcquire` on `k`, as a loop that ends decided; or, with lock 'skip' and the row held, with a null `answer`. */
const acquireStep = (schema: string, codec: Codec, lock: Lock): string => `
  LOOP
    ${load(schema, codec, lock, 'fast')}
    ${codec.decide.body}${BLOCKED}${store(schema, slackOf(codec), codec.deficit === undefined ? '' : ', receipts = rcpts')}
  END LOOP;`;

/** The state now of `state`, for the answer of an operation that is not a decision (as `peek(key, 0)`). */
const stateNow = (schema: string, codec: Codec, state: string): string => `
      SELECT d.answer INTO answer FROM ${schema}.ratekeeper_${codec.name}_decide(${state}, now, 0, rule) d;
      answer[2] := 0;`;

/** Sets `pos` to the place of receipt `receipt` among the key's receipts, 0 when the key does not hold it. */
const FIND = `
      pos := 0;
      FOR j IN 1 .. coalesce(cardinality(rcpts), 0) / 2 LOOP
        IF rcpts[2 * j - 1] = receipt THEN pos := j; EXIT; END IF;
      END LOOP;`;

/** Removes the receipt at `pos`; a bucket's segment joins the one before (its lowest deficit is still the earlier receipts' bound). */
const drop = (codec: Codec): string => `${codec.deficit === undefined ? '' : `
        IF pos > 1 THEN rcpts[2 * pos - 2] := least(rcpts[2 * pos - 2], rcpts[2 * pos]); END IF;`}
        rcpts := rcpts[1 : 2 * pos - 2] || rcpts[2 * pos + 1 : cardinality(rcpts)];
        IF cardinality(rcpts) = 0 THEN rcpts := NULL; END IF;
        keep := true;`;

/**
 * A refund of `prm` permits on receipt `receipt`: nothing unless the key still holds it (a reset, a
 * rule change, the key's expiry, a charge at the debt bound and the 65th reservation void
 * receipts). A bucket gives back at most the lowest deficit since the grant, the least of its own
 * segment's and every later one's: what refill repaid is never credited, and neither is what an
 * earlier refund gave back. What it gives comes off every later minimum too. A window or log gives
 * back what its codec finds still counted. Either way the receipt goes.
 */
export const refund = (schema: string, codec: Codec): string => {
  const call = (permits: string, mark: string) => `SELECT r.next INTO next FROM ${schema}.ratekeeper_${codec.name}_refund(s, now, ${permits}, rule, ${mark}) r;`;
  const give =
    codec.deficit === undefined
      ? `
        ${call('prm', 'rcpts[2 * pos]')}
        s := coalesce(next, s);${drop(codec)}`
      : `${fold(codec)}
        IF rcpts IS NULL THEN
          -- Full now: nothing is owed, and the refill to now is stored, as in memory.
          ${call('0', '0')}
          s := next;
          keep := true;
        ELSE
          bound := rcpts[2 * pos];
          FOR j IN pos + 1 .. cardinality(rcpts) / 2 LOOP bound := least(bound, rcpts[2 * j]); END LOOP;
          deficit := ${codec.deficit};
          ${call('prm', 'bound')}
          s := next;
          given := deficit - ${codec.deficit};
          FOR j IN pos .. cardinality(rcpts) / 2 LOOP rcpts[2 * j] := rcpts[2 * j] - given; END LOOP;${drop(codec)}
        END IF;`;
  return `${FIND}
      IF pos > 0 THEN${give}
      END IF;`;
};

/** Keeps a granted reservation's receipt; past the bound the oldest is voided: its refund then gives nothing. */
export const keepReceipt = (codec: Codec): string => `
          rcpts := coalesce(rcpts, '{}') || ARRAY[receipt, ${codec.mark}];
          IF cardinality(rcpts) > ${2 * MAX_RECEIPTS} THEN rcpts := rcpts[3 : cardinality(rcpts)]; END IF;`;

/**
 * A charge of `prm` permits; with a receipt, a settle past what was reserved: the reservation's
 * receipt goes, then the excess is charged. Leaves the state after in `next`.
 */
export const charge = (schema: string, codec: Codec): string => `
        IF receipt IS NOT NULL THEN ${FIND}
          IF pos > 0 THEN ${drop(codec)}
          END IF;
        END IF;${fold(codec)}
        SELECT c.next, c.forgave INTO next, forgave FROM ${schema}.ratekeeper_${codec.name}_charge(s, now, prm, rule) c;
        -- What passed the debt bound was dropped: a refund of an earlier grant could now give back permits never counted.
        IF forgave THEN rcpts := NULL; END IF;`;

/** The variables of the key operations (their receipts, charges and refunds), beside {@link VARIABLES}. */
export const OPERATION_VARIABLES = `stayed boolean := false;
  j int;
  pos int;
  forgave boolean;
  keep boolean;
  bound numeric;
  deficit numeric;
  given numeric;`;

/**
 * The general function: `op` on `keys[i]` (each prefixed by `head`; `legacy` heads the previous
 * version's row keys) with `permits[i]` at `nows[i]` (null: the server's clock) under `rules` (one
 * rule for every key, or one per key, each `ruleLength` numbers), three numbers per key in the order
 * given (remaining, retryAfterMs with 0 for an allowance, resetAfterMs). 'block' takes its duration
 * as the permits; 'reserve' keeps `receipt`, a caller's random id, which a 'refund' names; a
 * 'reset' answers nothing. Rows are locked in key order whatever the order asked, so two batches
 * sharing keys wait for each other instead of deadlocking. A 'refund' (one key) acts under the rule
 * its row is counted under (see load) and, when that is not the rule sent, answers it after its
 * three numbers: its limit and windowMs.
 */
const general = (schema: string, codec: Codec): string => {
  const fn = (op: string) => `${schema}.ratekeeper_${codec.name}_${op}`;
  return `
CREATE OR REPLACE FUNCTION ${schema}.${decideFunction(codec)}(head text, legacy text, keys text[], permits numeric[], nows numeric[], rules numeric[], op text, receipt numeric DEFAULT NULL)
RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  ${VARIABLES}
  ${BATCH_VARIABLES}
  ${OPERATION_VARIABLES}
BEGIN
  FOREACH i IN ARRAY CASE WHEN cardinality(keys) = 1 THEN '{1}' ELSE ${BY_KEY} END LOOP
    ${takeCall(codec)}
    IF op = 'reset' THEN
      ${deleteRows(`${schema}.ratekeeper_state`)};
      CONTINUE;
    END IF;
    LOOP
      IF op = 'peek' THEN
        ${load(schema, codec, 'share')}
      ELSE
        ${load(schema, codec, 'update', 'general', false, "op = 'refund'")}
      END IF;
      next := NULL;
      keep := false;
      IF op = 'block' THEN
        -- A shorter block never shortens a longer one.
        blocked := greatest(blocked, now + prm);
        keep := true;
        ${stateNow(schema, codec, 's')}
      ELSIF op = 'charge' THEN${charge(schema, codec)}
        ${stateNow(schema, codec, 'next')}
      ELSIF op = 'refund' THEN
        ${refund(schema, codec)}
        ${stateNow(schema, codec, 's')}
      ELSIF op IN ('acquire', 'reserve', 'peek') THEN
        IF op <> 'peek' THEN ${fold(codec)} END IF;
        SELECT d.next, d.answer INTO next, answer FROM ${fn('decide')}(s, now, prm, rule) d;
        -- No permits: the state now, for a dashboard (a key in debt is simply one with none left).
        IF prm = 0 THEN answer[2] := 0; END IF;
        ${BLOCKED}
        EXIT WHEN op = 'peek';
        IF op = 'reserve' AND next IS NOT NULL THEN${keepReceipt(codec)}
        END IF;
      ELSE
        RAISE EXCEPTION 'ratekeeper: unknown operation %', op;
      END IF;
      ${store(schema, slackOf(codec), ', blocked_until = blocked, receipts = rcpts', 'keep OR ')}
    END LOOP;
    reply[3 * i - 2 : 3 * i] := answer;
  END LOOP;
  -- Last, once every key is decided: this lock-free reclaim never waits, so the rows it holds until
  -- commit cannot close a cycle with a batch waiting for this one.
  ${reclaim(schema, '2 * inserted')}
  RETURN CASE WHEN op = 'reset' THEN '{}' WHEN stayed THEN reply || ARRAY[rule[1], rule[2]] ELSE reply END;
END ${QUOTE};
`;
};

/**
 * The fast path of `codec`:
 *
 * - `ratekeeper_acquire_one_<codec>(head, legacy, key, permits, now, rule)` decides one key and
 *   returns {remaining, retryAfterMs (0: allowed), resetAfterMs}. A row it inserts reclaims up to
 *   two expired rows.
 * - `ratekeeper_acquire_batch_<codec>(head, legacy, keys, permits, nows, rules)` decides `keys[i]`
 *   for `permits[i]` at `nows[i]` (null: the server's clock) under one rule or one per key, three
 *   numbers per key in the order given. It takes rows in key order whatever the order asked,
 *   decisions on one key in the order asked, and never waits for a row another transaction holds:
 *   that key, and its later calls in the batch, answer {-1, -1, -1}, undecided (the limiter sends
 *   them again, alone, where the one-key function waits for the row up to `lock_timeout`).
 */
const fast = (schema: string, codec: Codec): string => `
CREATE OR REPLACE FUNCTION ${schema}.${oneKeyFunction(codec)}(head text, legacy text, uk text, prm numeric, clk numeric, rule numeric[]) RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  ${VARIABLES}
  ${codec.decide.declare}
BEGIN
  ${setStoredKey('k', 'head || uk')}
  ${acquireStep(schema, codec, 'update')}
  ${reclaim(schema, '2')}
  RETURN answer;
END ${QUOTE};

CREATE OR REPLACE FUNCTION ${schema}.${manyKeysFunction(codec)}(head text, legacy text, keys text[], permits numeric[], nows numeric[], rules numeric[]) RETURNS numeric[]
LANGUAGE plpgsql VOLATILE
AS ${QUOTE}
DECLARE
  ${VARIABLES}
  ${codec.decide.declare}
  ${BATCH_VARIABLES}
  held text;
BEGIN
  FOREACH i IN ARRAY ${BY_KEY} LOOP
    ${takeCall(codec)}
    IF k = held THEN
      answer := NULL;
    ELSE
      ${acquireStep(schema, codec, 'skip')}
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
`;

/** Everything `codec` needs in the database: its operations, the general function and the fast path. */
export const codecShell = (schema: string, codec: Codec): string => codecFunctions(schema, codec) + general(schema, codec) + fast(schema, codec);
