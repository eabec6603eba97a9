// The key-management operations of PostgresRateLimiter (peek, reset, charge, reserve/settle/cancel,
// block) against the in-memory twin, the specification (src/limiter/keyed-rate-limiter.ts): random
// traces mixing them with tryAcquire decide exactly as a KeyedRateLimiter on a ManualClock given the
// same readings, for all five algorithms, through pg and postgres.js; then the laws one by one, and
// the attacks: huge numbers, fractional and backward clocks, concurrency, the migration of a table
// made by the previous version (test/postgres/fixtures/schema-v1.sql, generated from it).
import { readFile } from 'node:fs/promises';
import { fc, test } from '@fast-check/vitest';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { type AccountingAlgorithm, type Decision, KeyedRateLimiter, ManualClock, type Reservation, Rule, TokenBucket } from '../../src/index';
import type { AsyncReservation } from '../../src/limiter/reservation';
import { withRateLimit } from '../../src/http';
import { migrate, type PostgresClientLike, PostgresRateLimiter } from '../../src/postgres';
import type { RedisAlgorithm } from '../../src/redis';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { uniquePrefix } from '../redis/helpers/clients';
import { connection, postgresPort, uniqueSchema } from '../stores/support/postgres-store';

const rules = fc
  .record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

// Toward the ends of the Rule domain: windows to 2^42 ms, limits to 2^52, on whole-ms readings (the
// in-memory algorithms promise exactness on integer clocks: on fractional readings their products
// past 2^53 are rounded doubles, where PostgreSQL's numeric stays exact). Past 2^52 a key in debt
// counts past 2^53, which memory rounds too (a counter charged 2^53 - 1 at a limit of 2^52 + 1
// waits 1 ms less there than exactly). The ends themselves are checked apart, below.
const hugeRules = fc
  .record({
    limit: fc.oneof(fc.constantFrom(1_000_000_000, 2 ** 50, 2 ** 52, 2 ** 52 - 1), fc.integer({ min: 1, max: 2 ** 52 })),
    windowMs: fc.oneof(fc.constantFrom(86_400_000, Rule.MAX_WINDOW_MS), fc.integer({ min: 20_000, max: Rule.MAX_WINDOW_MS })),
  })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

/** Clock moves forward: small, a window or two, quarters of a ms, huge. */
const forward = [
  fc.constant(0),
  fc.integer({ min: 1, max: 3_000 }),
  fc.integer({ min: 0, max: 400_000 }),
  fc.integer({ min: 0, max: 4_000 }).map((q) => q / 4),
  fc.integer({ min: 0, max: 2 ** 43 }),
];

/** One step of a trace: the clock moves, then one operation. */
const stepWith = (moveMs: fc.Arbitrary<number>) =>
  fc.record({
    moveMs,
    key: fc.constantFrom('a', 'b'),
    op: fc.constantFrom('tryAcquire', 'tryAcquire', 'peek', 'peek0', 'reset', 'charge', 'charge', 'reserve', 'reserve', 'settle', 'settle', 'cancel', 'block'),
    share: fc.double({ min: 0, max: 1, noNaN: true }),
    pick: fc.nat(),
  });
const tracesWith = (moveMs: fc.Arbitrary<number>) =>
  fc.record({
    startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
    steps: fc.array(stepWith(moveMs), { minLength: 1, maxLength: 40, size: 'max' }),
  });
// A KeyedRateLimiter holds every reading earlier than its latest to that latest, across keys, and
// remembers readings no state stored: the twin for clocks that only move forward.
const traces = tracesWith(fc.oneof(...forward));
const integerTraces = tracesWith(fc.oneof(...forward.filter((_, i) => i !== 3)));
// Backwards too: the twin is then each key's algorithm state itself, which counts a reading earlier
// than the one it stored as no time passing, as a row does.
const backwardTraces = tracesWith(fc.oneof(...forward, fc.integer({ min: -5_000, max: -1 }), fc.integer({ min: -4_000, max: 0 }).map((q) => q / 4)));
type Step = ReturnType<typeof stepWith> extends fc.Arbitrary<infer S> ? S : never;
type Trace = { startMs: number; steps: Step[] };

/** What a trace asks of the twin: a KeyedRateLimiter's key management. */
type Twin = Pick<KeyedRateLimiter, 'tryAcquire' | 'peek' | 'reset' | 'charge' | 'block' | 'reserve'>;

/**
 * The key management of a KeyedRateLimiter (src/limiter/keyed-rate-limiter.ts) on each key's
 * algorithm state, with the readings as given: a state counts a reading earlier than the one it
 * stored as no time passing, and no reading is held to a later one that no state stored.
 */
function perStateTwin(clock: ManualClock, create: () => AccountingAlgorithm): Twin {
  const states = new Map<string, AccountingAlgorithm>();
  const blocks = new Map<string, number>();
  const state = (key: string) => states.get(key) ?? (states.set(key, create()), states.get(key)!);
  const blocked = (key: string, alone: Decision): Decision | undefined => {
    const until = blocks.get(key);
    if (until === undefined || until <= clock.now()) return undefined;
    const left = Math.ceil(until - clock.now());
    return { allowed: false, limit: alone.limit, remaining: 0, retryAfterMs: Math.max(left, alone.retryAfterMs), resetAfterMs: Math.max(left, alone.resetAfterMs) };
  };
  const peek = (key: string, permits = 1) => {
    const alone = (states.get(key) ?? create()).peek(clock.now(), permits);
    return blocked(key, alone) ?? alone;
  };
  const charge = (key: string, permits: number) => state(key).charge(clock.now(), permits);
  return {
    tryAcquire: (key, permits = 1) => blocked(key, peek(key, permits)) ?? state(key).tryAcquire(clock.now(), permits),
    peek,
    reset: (key) => void (states.delete(key), blocks.delete(key)),
    charge,
    block: (key, durationMs) => {
      if (durationMs > 0) blocks.set(key, Math.max(blocks.get(key) ?? -Infinity, clock.now() + durationMs));
    },
    reserve: (key, permits = 1) => {
      const refusal = blocked(key, peek(key, permits));
      const granted = refusal === undefined ? state(key) : undefined;
      const { decision, receipt } = granted?.reserve(clock.now(), permits) ?? { decision: refusal!, receipt: undefined };
      let settled = false;
      const settle = (actual: number): Decision => {
        if (receipt === undefined) return decision;
        if (settled) throw Object.assign(new Error('already settled'), { code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
        settled = true;
        // As KeyedRateLimiter#settle: settled at or past the reservation, the refund of nothing still
        // releases the receipt (and brings the state to the reading).
        if (states.get(key) === granted) granted!.refund(clock.now(), receipt, actual < permits ? permits - actual : 0);
        if (actual > permits) return charge(key, actual - permits);
        return (states.get(key) ?? create()).peek(clock.now(), 0);
      };
      return { decision, settle, cancel: () => void settle(0) };
    },
  };
}

/** What an operation answered, or the code of what it threw: both sides must agree on either. */
type Outcome = Decision | undefined | { thrown: unknown };

async function outcome(run: () => unknown): Promise<Outcome> {
  try {
    return (await run()) as Decision | undefined;
  } catch (error) {
    return { thrown: (error as { code?: unknown }).code ?? String(error) };
  }
}

/**
 * Replays a trace on the twin and on PostgreSQL, step by step, and returns both sides' outcomes.
 * Reservations are kept in step order on both sides; settle and cancel take one of them (settled or
 * not: a second settle must throw on both).
 */
async function replay(client: PostgresClientLike, schema: string, algorithm: RedisAlgorithm, rule: Rule, trace: Trace, twin: 'keyed' | 'per-state' = 'keyed') {
  const clock = new ManualClock(trace.startMs);
  const create = () => new twins[algorithm](rule) as AccountingAlgorithm;
  const memory: Twin = twin === 'keyed' ? new KeyedRateLimiter({ algorithm: create, clock }) : perStateTwin(clock, create);
  const store = new PostgresRateLimiter({ client, schema, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('ops'), timeoutMs: 10_000 });
  const reservations: [Reservation, AsyncReservation][] = [];
  const fromMemory: Outcome[] = [];
  const fromStore: Outcome[] = [];
  const compare = async (inMemory: () => unknown, inStore: () => unknown) => {
    fromMemory.push(await outcome(inMemory));
    // A step the twin cannot take (a wide token bucket's reserve today) is not asked of the store.
    const last = fromMemory.at(-1);
    fromStore.push(last !== undefined && 'thrown' in last && last.thrown === 'ERR_RATEKEEPER_OUT_OF_RANGE' ? last : await outcome(inStore));
  };
  for (const { moveMs, key, op, share, pick } of trace.steps) {
    clock.set(clock.now() + moveMs);
    const permits = 1 + Math.floor(share * (rule.limit - 1));
    if (op === 'tryAcquire') await compare(() => memory.tryAcquire(key, permits), () => store.tryAcquire(key, permits));
    else if (op === 'peek') await compare(() => memory.peek(key, permits), () => store.peek(key, permits));
    else if (op === 'peek0') await compare(() => memory.peek(key, 0), () => store.peek(key, 0));
    else if (op === 'reset') await compare(() => memory.reset(key), () => store.reset(key));
    else if (op === 'block') {
      const durationMs = pick % 3 === 0 ? 0 : Math.floor(share * 3 * rule.windowMs);
      await compare(() => memory.block(key, durationMs), () => store.block(key, durationMs));
    } else if (op === 'charge') {
      // Within the limit, past it, or the most a charge may be.
      const amount = [permits, Math.min(Number.MAX_SAFE_INTEGER, permits + rule.limit), Number.MAX_SAFE_INTEGER][pick % 3]!;
      await compare(() => memory.charge(key, amount), () => store.charge(key, amount));
    } else if (op === 'reserve') {
      let inMemory: Reservation | undefined;
      await compare(
        () => (inMemory = memory.reserve(key, permits)).decision,
        async () => {
          const reservation = await store.reserve(key, permits);
          if (inMemory !== undefined) reservations.push([inMemory, reservation]);
          return reservation.decision;
        },
      );
    } else if (reservations.length > 0) {
      const [inMemory, inStore] = reservations[pick % reservations.length]!;
      const actual = op === 'cancel' ? 0 : Math.min(Number.MAX_SAFE_INTEGER, Math.floor(share * 2 * (inMemory.decision.limit - inMemory.decision.remaining)));
      if (op === 'cancel') await compare(() => inMemory.cancel(), () => inStore.cancel());
      else await compare(() => inMemory.settle(actual), () => inStore.settle(actual));
    }
  }
  return { fromMemory, fromStore };
}

/** Runs a statement on either client library and resolves with its rows. */
async function rows(client: PostgresClientLike, sql: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
  if ('unsafe' in client) return [...(await client.unsafe(sql, values as never[]))] as Record<string, unknown>[];
  return (await client.query(sql, values)).rows as Record<string, unknown>[];
}

const clients: [string, () => { client: PostgresClientLike; close: () => Promise<void> }][] = [
  [
    'pg',
    () => {
      const client = new pg.Pool({ ...connection(), max: 8 });
      client.on('error', () => {});
      return { client, close: () => client.end() };
    },
  ],
  [
    'postgres.js',
    () => {
      const client = postgres({ ...connection(), max: 8, onnotice: () => {} });
      return { client, close: () => client.end({ timeout: 1 }) };
    },
  ],
];

describe.skipIf(!postgresPort).each(clients)('PostgresRateLimiter key management via %s', { timeout: 120_000 }, (_name, connect) => {
  let client: PostgresClientLike;
  let close: () => Promise<void>;
  const schema = uniqueSchema('ops');
  beforeAll(async () => {
    ({ client, close } = connect());
    await migrate(client, { schema });
  });
  afterAll(async () => {
    await rows(client, `DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await close();
  });

  /** The rows stored under `prefix`. */
  const stored = async (prefix: string) =>
    rows(client, `SELECT key, state::text AS state, expires_at::text AS expires_at, blocked_until::text AS blocked_until FROM "${schema}".ratekeeper_state WHERE starts_with(key, $1)`, [prefix]);

  for (const algorithm of algorithmNames) {
    test.prop([rules, traces], { numRuns: 25 })(`${algorithm}: traces mixing every operation decide exactly as the in-memory twin`, async (rule, trace) => {
      const { fromMemory, fromStore } = await replay(client, schema, algorithm, rule, trace);
      expect(fromStore).toStrictEqual(fromMemory);
    });

    test.prop([hugeRules, integerTraces], { numRuns: 20 })(`${algorithm}: and so do they for limits up to 2^52 and windows up to 2^42 ms, on whole-ms readings`, async (rule, trace) => {
      const { fromMemory, fromStore } = await replay(client, schema, algorithm, rule, trace);
      expect(fromStore).toStrictEqual(fromMemory);
    });

    test.prop([rules, backwardTraces], { numRuns: 15 })(`${algorithm}: with readings running backwards too, each state counts them as no time passing, as in memory`, async (rule, trace) => {
      const { fromMemory, fromStore } = await replay(client, schema, algorithm, rule, trace, 'per-state');
      expect(fromStore).toStrictEqual(fromMemory);
    });

    test.prop([fc.oneof(rules, hugeRules, fc.constant(new Rule(Number.MAX_SAFE_INTEGER, Rule.MAX_WINDOW_MS))), fc.integer({ min: 0, max: 400_000 }), fc.array(fc.tuple(fc.integer({ min: 0, max: 100_000 }), fc.double({ min: 0, max: 1, noNaN: true })), { maxLength: 8 })], { numRuns: 20 })(
      `${algorithm}: a cancel with nothing else on the key in between, however late, leaves every later decision equal to a key that never reserved (limits to 2^53 - 1 too)`,
      async (rule, delayMs, later) => {
        const clock = new ManualClock(1_800_000_000_000);
        const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('exact'), timeoutMs: 10_000 });
        // Both keys spent the same before; only `reserved` reserves, then cancels.
        await limiter.tryAcquire('reserved');
        await limiter.tryAcquire('twin');
        const reservation = await limiter.reserve('reserved', rule.limit > 1 ? rule.limit - 1 : 1);
        clock.advance(delayMs);
        await reservation.cancel();
        for (const [moveMs, share] of later) {
          clock.advance(moveMs);
          const permits = 1 + Math.floor(share * (rule.limit - 1));
          expect(await limiter.peek('reserved', 0)).toStrictEqual(await limiter.peek('twin', 0));
          expect(await limiter.tryAcquire('reserved', permits)).toStrictEqual(await limiter.tryAcquire('twin', permits));
        }
      },
    );

    test.prop(
      [
        rules,
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 100_000 }), fc.double({ min: 0, max: 1, noNaN: true })), { maxLength: 6 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
      ],
      { numRuns: 15 },
    )(`${algorithm}: with other activity in between, a settled reservation never leaves the key better off than never reserving`, async (rule, size, between, extra, used) => {
      const clock = new ManualClock(1_800_000_000_000);
      const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('better'), timeoutMs: 10_000 });
      const permits = 1 + Math.floor(size * (rule.limit - 1));
      const reservation = await limiter.reserve('real', permits);
      // The twin is given exactly what the real key granted, and both one charge of at most the
      // limit (so that neither reaches the debt bound, where forgiving differs).
      for (const [moveMs, share] of between) {
        clock.advance(moveMs);
        const wanted = 1 + Math.floor(share * (rule.limit - 1));
        if ((await limiter.tryAcquire('real', wanted)).allowed) await limiter.charge('twin', wanted);
      }
      const charged = 1 + Math.floor(extra * (rule.limit - 1));
      await limiter.charge('real', charged);
      await limiter.charge('twin', charged);
      await reservation.settle(Math.floor(used * permits));
      for (const moveMs of [0, 1, rule.windowMs / 2, rule.windowMs]) {
        clock.advance(moveMs);
        for (let p = 1; p <= Math.min(rule.limit, 8); p++) {
          const [real, twin] = [await limiter.peek('real', p), await limiter.peek('twin', p)];
          if (twin.allowed) {
            if (real.allowed) expect(real.remaining).toBeLessThanOrEqual(twin.remaining);
          } else {
            expect(real.allowed).toBe(false);
            expect(real.retryAfterMs).toBeGreaterThanOrEqual(twin.retryAfterMs);
          }
        }
      }
    });

    test.prop([rules, fc.array(fc.tuple(fc.integer({ min: 0, max: 100_000 }), fc.integer({ min: 0, max: 20 })), { minLength: 1, maxLength: 10 })], { numRuns: 10 })(
      `${algorithm}: peek inserts no row, whatever it is asked`,
      async (rule, peeks) => {
        const clock = new ManualClock(1_800_000_000_000);
        const prefix = uniquePrefix('peek');
        const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule, onStoreError: 'deny', clock, prefix, timeoutMs: 10_000 });
        for (const [moveMs, permits] of peeks) {
          clock.advance(moveMs);
          const decision = await limiter.peek('never', Math.min(permits, rule.limit));
          expect(decision).toMatchObject({ allowed: true, remaining: rule.limit - Math.min(permits, rule.limit) });
        }
        expect(await stored(prefix)).toEqual([]);
      },
    );

    test.prop([rules, fc.integer({ min: 1, max: 60 }), fc.integer({ min: 0, max: 2 ** 42 })], { numRuns: 10 })(
      `${algorithm}: on the server's clock, the row's expiry covers the debt and the block`,
      async (rule, charged, blockMs) => {
        const prefix = uniquePrefix('expiry');
        const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule, onStoreError: 'deny', prefix, timeoutMs: 10_000 });
        const [{ ms }] = (await rows(client, 'SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::text AS ms')) as [{ ms: string }];
        const debt = await limiter.charge('k', charged);
        await limiter.block('k', blockMs);
        const [row] = await stored(prefix);
        expect(BigInt(row!.expires_at as string)).toBeGreaterThanOrEqual(BigInt(ms) + BigInt(debt.resetAfterMs));
        if (blockMs > 0) {
          expect(Number(row!.blocked_until)).toBeGreaterThanOrEqual(Number(ms) + blockMs);
          expect(BigInt(row!.expires_at as string)).toBeGreaterThanOrEqual(BigInt(String(row!.blocked_until).split('.')[0]!));
        }
      },
    );

    test(`${algorithm}: 200 reservations at once for 10 permits: exactly 10 granted, and cancelling them all gives every permit back`, async () => {
      const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule: new Rule(10, 1e12), onStoreError: 'deny', prefix: uniquePrefix('burst'), timeoutMs: 10_000 });
      const reservations = await Promise.all(Array.from({ length: 200 }, () => limiter.reserve('hot')));
      expect(reservations.filter(({ decision }) => decision.degraded !== undefined)).toEqual([]);
      const granted = reservations.filter(({ decision }) => decision.allowed);
      expect(granted.map(({ decision }) => decision.remaining).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      await Promise.all(reservations.map((reservation) => reservation.cancel()));
      expect(await limiter.peek('hot', 0)).toMatchObject({ allowed: true, remaining: 10 });
    });
  }

  test('at the ends of the domain (a limit of 2^53 - 1, a window of 2^42 ms), charges of 2^53 - 1 stay exact: in debt one full limit deep, as new two windows on', async () => {
    const rule = new Rule(Number.MAX_SAFE_INTEGER, Rule.MAX_WINDOW_MS);
    for (const algorithm of algorithmNames) {
      const clock = new ManualClock(Rule.MAX_WINDOW_MS);
      const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('ends') });
      expect(await limiter.charge('k', Number.MAX_SAFE_INTEGER)).toMatchObject({ allowed: true, remaining: 0 });
      const debt = await limiter.charge('k', Number.MAX_SAFE_INTEGER);
      expect(debt).toMatchObject({ allowed: true, remaining: 0 });
      expect(debt.resetAfterMs).toBeLessThanOrEqual(2 * Rule.MAX_WINDOW_MS);
      const refused = await limiter.tryAcquire('k');
      expect(refused).toMatchObject({ allowed: false, remaining: 0 });
      clock.advance(refused.retryAfterMs - 1);
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1 });
      clock.advance(1);
      expect(await limiter.peek('k')).toMatchObject({ allowed: true });
      clock.advance(2 * Rule.MAX_WINDOW_MS);
      expect(await limiter.peek('k', 0)).toStrictEqual({ allowed: true, limit: Number.MAX_SAFE_INTEGER, remaining: Number.MAX_SAFE_INTEGER, retryAfterMs: 0, resetAfterMs: 0 });
    }
  });

  test('concurrent operations on one key lose no update: 100 charges, 100 peeks and 20 blocks at once', async () => {
    for (const algorithm of algorithmNames) {
      const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule: new Rule(1000, 1e12), onStoreError: 'deny', prefix: uniquePrefix('together'), timeoutMs: 10_000 });
      const durations = Array.from({ length: 20 }, (_, i) => 1_000_000 + i * 1000);
      const answers = await Promise.all([
        ...Array.from({ length: 100 }, () => limiter.charge('k', 1)),
        ...Array.from({ length: 100 }, () => limiter.peek('k', 0)),
        ...durations.map((ms) => limiter.block('k', ms)),
      ]);
      expect(answers.filter((answer) => answer?.degraded !== undefined)).toEqual([]);
      const now = await limiter.peek('k', 0);
      expect(now).toMatchObject({ allowed: false, remaining: 0 });
      // The longest block holds, less the few ms the calls took.
      expect(now.retryAfterMs).toBeGreaterThan(1_019_000 - 5_000);
      await limiter.reset('k');
      await limiter.charge('k', 100);
      expect(await limiter.peek('k', 0)).toMatchObject({ allowed: true, remaining: 900 });
    }
  });

  test('each operation reads the clock as the in-memory limiter does: a reset never, a block of 0 ms once', async () => {
    // A clock that holds readings to the latest it gave (as the store suite's does) would otherwise
    // see a reading the in-memory twin never took.
    const reads = { store: [] as string[], memory: [] as string[] };
    let op = '';
    const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'fixed-window', rule: new Rule(5, 60_000), onStoreError: 'deny', clock: { now: () => (reads.store.push(op), 1000) }, prefix: uniquePrefix('reads') });
    const memory = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(5, 60_000)), clock: { now: () => (reads.memory.push(op), 1000) } });
    op = 'reset';
    await limiter.reset('k');
    memory.reset('k');
    op = 'block 0';
    await limiter.block('k', 0);
    memory.block('k', 0);
    op = 'charge';
    await limiter.charge('k', 1);
    memory.charge('k', 1);
    expect(reads.store).toEqual(reads.memory);
    expect(reads.store).toEqual(['block 0', 'charge']);
  });

  test('a reservation settles once: a second settle or cancel rejects with ERR_RATEKEEPER_ALREADY_SETTLED and changes nothing', async () => {
    const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'token-bucket', rule: new Rule(10, 60_000), onStoreError: 'deny', clock: new ManualClock(0), prefix: uniquePrefix('twice') });
    const reservation = await limiter.reserve('k', 6);
    expect(await reservation.settle(2)).toMatchObject({ allowed: true, remaining: 8 });
    await expect(reservation.settle(0)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
    await expect(reservation.cancel()).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
    await expect(reservation.settle(-1)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_OUT_OF_RANGE' });
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 8 });
  });

  test('a refund after a reset gives nothing back, even on a key used again at the same reading', async () => {
    for (const algorithm of algorithmNames) {
      const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule: new Rule(10, 60_000), onStoreError: 'deny', clock: new ManualClock(1000), prefix: uniquePrefix('reset') });
      const reservation = await limiter.reserve('k', 4);
      await limiter.reset('k');
      await limiter.tryAcquire('k', 10);
      expect(await reservation.cancel()).toBeUndefined();
      expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 0 });
    }
  });

  test('a block: every decision refused until it ends, a shorter block never shortens it, no charge or refund lifts it, reset does', async () => {
    const clock = new ManualClock(5000);
    const prefix = uniquePrefix('block');
    const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'fixed-window', rule: new Rule(5, 60_000), onStoreError: 'deny', clock, prefix });
    const reservation = await limiter.reserve('k', 3);
    await limiter.block('k', 10_000);
    await limiter.block('k', 1_000);
    await limiter.charge('k', 1);
    await reservation.cancel();
    expect(await limiter.tryAcquire('k')).toStrictEqual({ allowed: false, limit: 5, remaining: 0, retryAfterMs: 10_000, resetAfterMs: 55_000 });
    expect(await limiter.peek('k', 0)).toStrictEqual({ allowed: false, limit: 5, remaining: 0, retryAfterMs: 10_000, resetAfterMs: 55_000 });
    expect((await limiter.reserve('k')).decision).toMatchObject({ allowed: false, retryAfterMs: 10_000 });
    clock.advance(9_999);
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1 });
    clock.advance(1);
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 3 });
    await limiter.block('k', 2 ** 42);
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 2 ** 42 });
    await limiter.reset('k');
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 4 });
    // Keys travel as array literals: quotes, backslashes and braces stay the key's own. A key
    // never used is blocked by a row with no state (null: every codec reads it as a new key).
    await limiter.block('q"\\{k}', 1_000);
    expect((await stored(`${prefix}fixed-window:q"\\{k}`)).map(({ state }) => state)).toEqual([null]);
    expect(await limiter.tryAcquire('q"\\{k}')).toMatchObject({ allowed: false, retryAfterMs: 1_000 });
    expect(await limiter.peek('q"\\{k', 0)).toMatchObject({ allowed: true });
    await expect(limiter.block('k', Infinity)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_OUT_OF_RANGE' });
    await expect(limiter.block('k', 2 ** 42 + 1)).rejects.toThrow('`durationMs` must be an integer from 0 to 4398046511104, got 4398046511105');
    await expect(limiter.charge('k', 2 ** 53)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_OUT_OF_RANGE' });
    await expect(limiter.peek('k', 6)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_OUT_OF_RANGE' });
    await expect(limiter.reserve('k\u0000')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
  });

  test('a block holds for decisions batched in one round trip (ratekeeper_decide) as for one alone (the one-key statement)', async () => {
    for (const algorithm of algorithmNames) {
      const clock = new ManualClock(1_000);
      const limiter = new PostgresRateLimiter({ client, schema, algorithm, rule: new Rule(5, 60_000), onStoreError: 'deny', clock, prefix: uniquePrefix('batched') });
      await limiter.block('k', 30_000);
      const batched = await Promise.all([limiter.tryAcquire('k'), limiter.tryAcquire('other'), limiter.tryAcquire('k', 5)]);
      expect(batched.map(({ allowed, retryAfterMs }) => [allowed, retryAfterMs])).toEqual([
        [false, 30_000],
        [true, 0],
        [false, 30_000],
      ]);
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 30_000 });
      expect(await limiter.peek('k', 0)).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 30_000 });
    }
  });

  test('acquire waits out a block, and a reset or a refund in this process wakes the waiter at once', async () => {
    const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'token-bucket', rule: new Rule(1, 600_000), onStoreError: 'deny', prefix: uniquePrefix('wake') });
    await limiter.block('blocked', 200);
    expect(await limiter.peek('blocked')).toMatchObject({ allowed: false });
    expect(await limiter.acquire('blocked', 1, { maxWaitMs: 5_000 })).toMatchObject({ allowed: true });
    const reservation = await limiter.reserve('refunded');
    // Willing to wait longer than the rule would make them (the server's and this process's clocks differ by a few ms).
    const afterRefund = limiter.acquire('refunded', 1, { maxWaitMs: 1_200_000 });
    await limiter.tryAcquire('reset', 1);
    const afterReset = limiter.acquire('reset', 1, { maxWaitMs: 1_200_000 });
    await reservation.cancel();
    await limiter.reset('reset');
    // Both would otherwise wait ten minutes.
    expect(await afterRefund).toMatchObject({ allowed: true });
    expect(await afterReset).toMatchObject({ allowed: true });
  });

  test('the HTTP middleware settles through its reservations: with skipFailedRequests a failed request gives its permit back', async () => {
    const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'fixed-window', rule: new Rule(2, 60_000), onStoreError: 'deny', clock: new ManualClock(0), prefix: uniquePrefix('http') });
    let status = 500;
    const handler = withRateLimit({ limiter, key: () => 'k', skipFailedRequests: true }, () => new Response('body', { status }));
    const answered = async () => {
      const response = await handler(new Request('http://localhost/'));
      // The settle runs after the response; the next peek on the key goes after it.
      await limiter.peek('k', 0);
      return response.status;
    };
    expect([await answered(), await answered(), await answered()]).toEqual([500, 500, 500]);
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 2 });
    status = 200;
    expect([await answered(), await answered(), await answered()]).toEqual([200, 200, 429]);
  });

  test('a blocked row is never reclaimed as expired, though its counts have long expired', async () => {
    // A schema of its own, so that the reclaim finds no other test's expired rows first.
    const own = uniqueSchema('reclaim');
    await migrate(client, { schema: own });
    const prefix = uniquePrefix('reclaim');
    const stored = async (prefix: string) => rows(client, `SELECT key FROM "${own}".ratekeeper_state WHERE starts_with(key, $1)`, [prefix]);
    const limiter = new PostgresRateLimiter({ client, schema: own, algorithm: 'token-bucket', rule: new Rule(1, 1_000), onStoreError: 'deny', prefix });
    await limiter.tryAcquire('blocked');
    await limiter.block('blocked', 60_000);
    await limiter.tryAcquire('idle');
    // Past both rows' counts (1 s, a quarter window of slack, the one-second grid): only the idle one has expired.
    await new Promise((resolve) => setTimeout(resolve, 2_600));
    for (let i = 0; i < 4; i++) await limiter.tryAcquire(`new-${i}`);
    expect((await stored(prefix)).map(({ key }) => String(key).split(':').at(-1)).sort()).toEqual(['blocked', 'new-0', 'new-1', 'new-2', 'new-3']);
    expect(await limiter.tryAcquire('blocked')).toMatchObject({ allowed: false });
    await rows(client, `DROP SCHEMA "${own}" CASCADE`);
  });

  test('with readings running backwards, each operation counts them as no time passing for the stored state', async () => {
    const clock = new ManualClock(100_000);
    const limiter = new PostgresRateLimiter({ client, schema, algorithm: 'token-bucket', rule: new Rule(10, 10_000), onStoreError: 'deny', clock, prefix: uniquePrefix('back') });
    const reservation = await limiter.reserve('k', 6);
    clock.set(90_000);
    expect(await limiter.charge('k', 2)).toMatchObject({ remaining: 2, resetAfterMs: 8_000 });
    expect(await limiter.peek('k', 3)).toMatchObject({ allowed: false, retryAfterMs: 1_000 });
    expect(await reservation.cancel()).toBeUndefined();
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 8, resetAfterMs: 2_000 });
  });

  test('a store that fails: peek and reserve answer by the outage policy (a fallback peeks, spending nothing); the writes reject', async () => {
    const errors: unknown[] = [];
    const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(2, 60_000)) });
    const limiter = new PostgresRateLimiter({ client, schema: uniqueSchema('absent'), algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError: fallback, onError: (error) => errors.push(error) });
    expect(await limiter.peek('k', 2)).toMatchObject({ allowed: true, remaining: 0, degraded: 'store-error' });
    expect(await limiter.peek('k', 0)).toMatchObject({ allowed: true, remaining: 2, degraded: 'store-error' });
    const reservation = await limiter.reserve('k');
    expect(reservation.decision).toMatchObject({ allowed: true, remaining: 1, degraded: 'store-error' });
    expect(await reservation.settle(5)).toBe(reservation.decision);
    await expect(limiter.charge('k', 1)).rejects.toThrow(/does not exist/);
    await expect(limiter.block('k', 1)).rejects.toThrow(/does not exist/);
    await expect(limiter.reset('k')).rejects.toThrow(/does not exist/);
    expect(errors).toHaveLength(3);
    const deny = new PostgresRateLimiter({ client, schema: uniqueSchema('absent'), algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError: 'deny' });
    expect(await deny.peek('k', 0)).toMatchObject({ allowed: true, remaining: 0, degraded: 'store-error' });
  });

  test('migrate brings a table made by the first version up to date, its rows kept (under their old row keys, adopted), and every operation works on it', async () => {
    const old = uniqueSchema('v1');
    const v1 = (await readFile(new URL('fixtures/schema-v1.sql', import.meta.url), 'utf8')).replaceAll('__SCHEMA__', `"${old}"`);
    await rows(client, v1);
    const clock = new ManualClock(0);
    const prefix = uniquePrefix('v1');
    const limiter = new PostgresRateLimiter({ client, schema: old, algorithm: 'sliding-window-log', rule: new Rule(5, 60_000), onStoreError: 'deny', clock, prefix });
    // What the first version stored for 2 permits taken at 0: its row key held the rule.
    await rows(client, `INSERT INTO "${old}".ratekeeper_state (key, state, expires_at) VALUES ('${prefix}sliding-window-log:5/60000:k', '{0,2}', 9000000000000)`);
    await migrate(client, { schema: old });
    await migrate(client, { schema: old });
    expect(await limiter.tryAcquire('k', 1)).toMatchObject({ allowed: true, remaining: 2 });
    const reservation = await limiter.reserve('k', 2);
    expect(await reservation.settle(1)).toMatchObject({ remaining: 1 });
    await limiter.block('k', 100);
    expect(await limiter.peek('k', 0)).toMatchObject({ allowed: false, retryAfterMs: 100 });
    await rows(client, `DROP SCHEMA "${old}" CASCADE`);
  });
});
