// Rules per key over PostgreSQL (D2 of issue 24): the row remembers the rule it is counted under,
// and a key's first call under another rule carries its usage over as `reconfigure` does, at that
// call. The law: the SQL, called with a rule per call (src/postgres/protocol.ts, as a limiter whose
// rule is a function of the key sends it), decides exactly as a twin made of one in-memory
// KeyedRateLimiter per key, reconfigured whenever that key's rule changes; batches whose calls
// differ in rule included. Before the row remembered its rule, a rule change started the key over
// (its row key held the rule), forgiving what it had used. A settle, cancel or lease extension,
// sent under its reservation's rule, acts under the row's and never changes it.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { type AsyncReservation, KeyedRateLimiter, ManualClock, type Reservation, Rule } from '../../src/index';
import { PostgresRateLimiter } from '../../src/postgres';
import { ownRule } from '../../src/postgres/protocol';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { postgresPort } from '../stores/support/postgres-store';
import { migratedSchema } from './helpers/schema';
import { sqlCalls } from './helpers/sql-calls';
import { MOVES, staleLeases, staleSettles } from '../support/stale-settle';

// Windows of 20 s and more: rows expire on the server's clock, which moves a few seconds per run.
const smallRules = fc.record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) });
const wideRules = fc.record({
  limit: fc.oneof(fc.constantFrom(Number.MAX_SAFE_INTEGER, 2 ** 50, 999_999_999_989), fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER })),
  windowMs: fc.oneof(fc.constantFrom(Rule.MAX_WINDOW_MS, 86_400_000), fc.integer({ min: 20_000, max: Rule.MAX_WINDOW_MS })),
});
const ruleSets = fc.array(
  fc.oneof({ weight: 3, arbitrary: smallRules }, { weight: 1, arbitrary: wideRules }).map(({ limit, windowMs }) => new Rule(limit, windowMs)),
  { minLength: 2, maxLength: 3 },
);

const step = fc.record({
  moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 0, max: 400_000 })),
  key: fc.constantFrom('a', 'b'),
  rule: fc.nat(),
  op: fc.constantFrom('acquire', 'acquire', 'batch', 'peek', 'peek0', 'charge', 'block', 'reset'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
});
const traces = fc.record({ startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })), steps: fc.array(step, { minLength: 1, maxLength: 30 }) });
/** Through a limiter, reservations too, settled or cancelled at random (`pick` chooses which), across rule changes. */
const limiterTraces = fc.record({
  startMs: traces.map(({ startMs }) => startMs),
  steps: fc.array(fc.record({ step, op: fc.constantFrom('reserve', 'reserve', 'settle', 'cancel', 'other', 'other', 'other'), pick: fc.nat() }), { minLength: 1, maxLength: 30 }),
});

describe.skipIf(!postgresPort)('rules per key over PostgreSQL', () => {
  const made = migratedSchema('rules');

  for (const algorithm of algorithmNames) {
    test.prop([ruleSets, traces], { numRuns: 30 })(`${algorithm}: a rule per call decides as one in-memory limiter per key, reconfigured when the key's rule changes`, async (rules, { startMs, steps }) => {
      const clock = new ManualClock(startMs);
      const sql = sqlCalls(made.pool, made.schema, algorithm, `${Math.random()}:`);
      const keys = new Map<string, { limiter: KeyedRateLimiter; rule: Rule }>();
      /** The twin of `key`, under `rule` from now on: reconfigured (its usage carried over) when the rule differs. */
      const twin = (key: string, rule: Rule) => {
        const held = keys.get(key);
        if (held === undefined) {
          const limiter = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
          keys.set(key, { limiter, rule });
          return limiter;
        }
        if (held.rule.limit !== rule.limit || held.rule.windowMs !== rule.windowMs) {
          held.limiter.reconfigure(() => new twins[algorithm](rule));
          held.rule = rule;
        }
        return held.limiter;
      };
      for (const [i, { moveMs, key, rule: pick, op, share }] of steps.entries()) {
        clock.advance(moveMs);
        const now = clock.now();
        const rule = rules[pick % rules.length]!;
        const permits = 1 + Math.floor(share * (rule.limit - 1));
        const at = `step ${i}: ${op} ${key}`;
        if (op === 'acquire') {
          expect(await sql.acquire(key, permits, now, rule), at).toStrictEqual(twin(key, rule).tryAcquire(key, permits));
        } else if (op === 'batch') {
          // Both keys, each under its own rule (a rule per call in the batch), and the first again.
          const calls = [
            { key, permits, now, rule },
            { key: key === 'a' ? 'b' : 'a', permits: 1, now, rule: rules[(pick + 1) % rules.length]! },
            { key, permits: 1, now, rule: rules[(pick + 2) % rules.length]! },
          ];
          const expected = calls.map((call) => twin(call.key, call.rule).tryAcquire(call.key, call.permits));
          expect(await sql.acquireBatch(calls), at).toStrictEqual(expected);
        } else if (op === 'peek' || op === 'peek0') {
          // Under the key's own rule: a peek under another rule carries over in its answer only (below).
          const own = keys.get(key)?.rule ?? rule;
          const asked = op === 'peek0' ? 0 : 1 + Math.floor(share * (own.limit - 1));
          expect(await sql.peek(key, asked, now, own), at).toStrictEqual(twin(key, own).peek(key, asked));
        } else if (op === 'charge') {
          const charged = Math.min(Number.MAX_SAFE_INTEGER, 1 + Math.floor(share * 3 * rule.limit));
          expect(await sql.charge(key, charged, now, rule), at).toStrictEqual(twin(key, rule).charge(key, charged));
        } else if (op === 'block') {
          const durationMs = Math.floor(share * 100_000);
          await sql.block(key, durationMs, now, rule);
          twin(key, rule).block(key, durationMs);
        } else {
          await sql.reset(key, rule);
          twin(key, rule).reset(key);
        }
      }
      for (const key of ['a', 'b']) {
        const own = keys.get(key)?.rule ?? rules[0]!;
        expect(await sql.peek(key, 0, clock.now(), own), `end ${key}`).toStrictEqual(twin(key, own).peek(key, 0));
      }
    });
  }

  for (const algorithm of algorithmNames) {
    test.prop([ruleSets, limiterTraces], { numRuns: 15 })(`${algorithm}: through PostgresRateLimiter, a rule function whose answer changes decides as the reconfigured twin; a settle or cancel after a change keeps the key's new rule`, async (rules, { startMs, steps }) => {
      const clock = new ManualClock(startMs);
      const current = new Map<string, Rule>();
      const limiter = new PostgresRateLimiter({
        client: made.pool,
        schema: made.schema,
        algorithm,
        rule: async (key: string) => current.get(key) ?? rules[0]!,
        onStoreError: 'deny',
        clock,
        prefix: `${Math.random()}:`,
      });
      const twins_ = new Map<string, KeyedRateLimiter>();
      const twin = (key: string) => twins_.get(key) ?? twins_.set(key, new KeyedRateLimiter({ algorithm: () => new twins[algorithm](current.get(key) ?? rules[0]!), clock })).get(key)!;
      const reservations: { store: AsyncReservation; memory: Reservation; rule: Rule; key: string; permits: number }[] = [];
      // Keys reset and not written since: a refund there answers a new key under its reservation's rule, as before.
      const absent = new Set<string>();
      for (const [i, { step: { moveMs, key, rule: pick, op: other, share }, op: chosen, pick: which }] of steps.entries()) {
        clock.advance(moveMs);
        const op = chosen === 'other' ? other : chosen;
        const at = `step ${i}: ${op} ${key}`;
        if (op === 'settle' || op === 'cancel') {
          // Sent under the reservation's rule, with no lookup: the key's rule stays as it is.
          const held = reservations.splice(which % Math.max(1, reservations.length), 1)[0];
          if (held === undefined) continue;
          if (op === 'cancel') {
            await held.store.cancel();
            held.memory.cancel();
            expect(await limiter.peek(held.key, 0), at).toStrictEqual(twin(held.key).peek(held.key, 0));
            continue;
          }
          const actual = Math.floor(share * 2 * held.permits);
          const inMemory = held.memory.settle(actual);
          const fresh = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](held.rule), clock });
          expect(await held.store.settle(actual), at).toStrictEqual(absent.has(held.key) && actual <= held.permits ? fresh.peek(held.key, 0) : inMemory);
          if (actual > held.permits) absent.delete(held.key);
          continue;
        }
        if (op === 'peek' || op === 'peek0') {
          // Under the key's own rule (a peek under another carries over in its answer only).
          expect(await limiter.peek(key, 0), at).toStrictEqual(twin(key).peek(key, 0));
          continue;
        }
        const rule = rules[pick % rules.length]!;
        const before = current.get(key) ?? rules[0]!;
        const held = twin(key);
        current.set(key, rule);
        if (before.limit !== rule.limit || before.windowMs !== rule.windowMs) held.reconfigure(() => new twins[algorithm](rule));
        const permits = 1 + Math.floor(share * (rule.limit - 1));
        if (op === 'reset') absent.add(key);
        else absent.delete(key);
        if (op === 'charge') {
          const charged = Math.min(Number.MAX_SAFE_INTEGER, 1 + Math.floor(share * 3 * rule.limit));
          expect(await limiter.charge(key, charged), at).toStrictEqual(held.charge(key, charged));
        } else if (op === 'reset') {
          await limiter.reset(key);
          held.reset(key);
        } else if (op === 'reserve') {
          const made = { store: await limiter.reserve(key, permits), memory: held.reserve(key, permits), rule, key, permits };
          expect(made.store.decision, at).toStrictEqual(made.memory.decision);
          if (made.memory.decision.allowed) reservations.push(made);
        } else if (op === 'block') {
          // At least 1 ms: a block of 0 ms sends nothing, so it carries no usage over.
          await limiter.block(key, 1 + Math.floor(share * 100_000));
          held.block(key, 1 + Math.floor(share * 100_000));
        } else {
          expect(await limiter.tryAcquire(key, permits), at).toStrictEqual(held.tryAcquire(key, permits));
        }
      }
    });
  }

  test.each(algorithmNames)('%s: a peek under another rule answers as the carried state would and writes nothing; A → B → A at one reading leaves the key as it was', async (algorithm) => {
    const sql = sqlCalls(made.pool, made.schema, algorithm, `${Math.random()}:`);
    const a = new Rule(10, 60_000);
    const b = new Rule(4, 30_000);
    const clock = new ManualClock(1_000_000);
    const twinA = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](a), clock });
    expect(await sql.acquire('k', 7, clock.now(), a)).toStrictEqual(twinA.tryAcquire('k', 7));
    // A → B → A at one reading: what was used (8, within b's bound of 8) goes and comes back whole.
    await sql.charge('k', 1, clock.now(), b);
    twinA.charge('k', 1);
    expect(await sql.peek('k', 0, clock.now(), a)).toStrictEqual(twinA.peek('k', 0));
    // That peek wrote nothing: the key is counted under b, as the charge left it.
    const underB = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](b), clock });
    underB.charge('k', 8);
    clock.advance(1_000);
    expect(await sql.peek('k', 0, clock.now(), b)).toStrictEqual(underB.peek('k', 0));
    expect(await sql.peek('k', 1, clock.now(), b)).toStrictEqual(underB.peek('k', 1));
    underB.reconfigure(() => new twins[algorithm](a));
    expect(await sql.peek('k', 0, clock.now(), a)).toStrictEqual(underB.peek('k', 0));
    expect(await sql.acquire('k', 1, clock.now(), a)).toStrictEqual(underB.tryAcquire('k', 1));
  });

  for (const algorithm of algorithmNames) {
    test.each(MOVES)(`${algorithm}: a settle or cancel of a reservation made under the key's old rule keeps the key under its new rule, as the reconfigured twin (%s to %s)`, async (...move) => {
      const { store, memory } = await staleSettles(algorithm, (rule, clock) => new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm, rule, onStoreError: 'deny', clock, prefix: `${Math.random()}:` }), move);
      expect(store).toStrictEqual(memory);
    });

    test.each(MOVES)(`${algorithm}: with concurrency, a lease taken under the key's old rule is extended, settled and cancelled under its new rule, as the reconfigured twin (%s to %s)`, async (...move) => {
      const { store, memory } = await staleLeases(algorithm, (rule, clock, concurrency) => new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm, rule, concurrency, onStoreError: 'deny', clock, prefix: `${Math.random()}:` }), move);
      expect(store).toStrictEqual(memory);
    });
  }

  test('a limiter under another rule on the same keys carries their usage over: nothing forgiven (before, its row key held the rule and the key started over)', async () => {
    const clock = new ManualClock(0);
    const options = { client: made.pool, schema: made.schema, algorithm: 'sliding-window-counter', onStoreError: 'deny', clock, prefix: `${Math.random()}:` } as const;
    const before = new PostgresRateLimiter({ ...options, rule: new Rule(10, 60_000) });
    const after = new PostgresRateLimiter({ ...options, rule: new Rule(20, 60_000) });
    expect(await before.tryAcquire('k', 7)).toMatchObject({ allowed: true, remaining: 3 });
    expect(await after.tryAcquire('k', 1)).toMatchObject({ allowed: true, remaining: 12 });
    // And back: 8 used, of 10.
    expect(await before.tryAcquire('k', 3)).toMatchObject({ allowed: false, remaining: 2 });
  });
});

describe("a refund's reply naming the key's own rule", () => {
  test.each([[['4', '30000']], [[String(Number.MAX_SAFE_INTEGER), String(Rule.MAX_WINDOW_MS)]]])('%j is that rule', (numbers) => {
    expect(ownRule(numbers)).toEqual(new Rule(Number(numbers[0]), Number(numbers[1])));
  });
  test.each([[['0', '30000']], [['4', 'NaN']], [['4.5', '10']], [[String(2 ** 53), '1']]])('%j is no reply of ours', (numbers) => {
    expect(() => ownRule(numbers)).toThrow(/unexpected reply/);
  });
});
