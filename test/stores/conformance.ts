// One suite, written once, run against every shared store ratekeeper supports: each
// test/stores/<store>.test.ts is an adapter (how to open that store's clients) and one call of
// storeConformance. Adding a store is one such file. What each store adds of its own (Redis
// batching and cluster slots, PostgreSQL's reclaiming of rows, ...) lives beside its own code's tests.
import { fc, test } from '@fast-check/vitest';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { type AsyncReservation, type Clock, type Decision, KeyedRateLimiter, ManualClock, type RateLimitAlgorithm, type Reservation, Rule, TokenBucket } from '../../src/index';
import type { RedisAlgorithm, StoreErrorPolicy } from '../../src/redis';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { uniquePrefix } from '../redis/helpers/clients';
import { HANG_MS } from '../support/hang';
import type { ServerName } from './servers/servers';

/** What the suite asks of a limiter, whichever store it runs on. */
export interface StoreLimiter {
  tryAcquire(key: string, permits?: number): Promise<Decision>;
}

/** The key management of API.md "Managing keys and settling costs", over a store. */
export interface AccountingLimiter extends StoreLimiter {
  peek(key: string, permits?: number): Promise<Decision>;
  reset(key: string): Promise<void>;
  charge(key: string, permits: number): Promise<Decision>;
  block(key: string, durationMs: number): Promise<void>;
  reserve(key: string, permits?: number): Promise<AsyncReservation>;
}


/** The options the suite gives a store's limiter: the same meaning on every store. */
export interface StoreLimiterOptions {
  algorithm: RedisAlgorithm;
  rule: Rule;
  onStoreError: StoreErrorPolicy;
  prefix: string;
  clock?: Clock;
  timeoutMs?: number;
  onError?: (error: unknown, key: string) => void;
}

/** A store's clients, open for one test file. */
export interface OpenStore {
  /** A limiter over this store's client. */
  limiter(options: StoreLimiterOptions): StoreLimiter;
  /** A limiter over a client of this store whose server cannot be reached (nothing listens there). */
  unreachable(options: StoreLimiterOptions): StoreLimiter;
  /** Forgets the keys under `prefix` and any cached script, as a server restarted without persistence would. */
  wipe(prefix: string): Promise<void>;
  close(): Promise<void>;
}

/** One store under test: the adapter a test/stores/<store>.test.ts file hands to {@link storeConformance}. */
export interface StoreUnderTest {
  /** Shown in the test names, e.g. 'Valkey via iovalkey'. */
  readonly name: string;
  /** The server the store runs on: without it the suite skips (and the run's summary says so). */
  readonly needs: ServerName;
  /** Whether that server was started for this run. */
  readonly available: boolean;
  /** How many random traces each differential property replays. @default 50 */
  readonly numRuns?: number;

  open(): Promise<OpenStore>;
}

// Stores expire keys on their own clock while a ManualClock jumps; windows of 20 s and more keep
// every key's expiry (at least windowMs / limit, or 1 s for the fixed window, see below) far beyond
// the few real milliseconds a trace takes. Whole-ms windows: the Rule domain (PLAN decision 1).
const rules = fc
  .record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

// Rules whose limit × windowMs passes 2^53, up to the ends of the Rule domain: every store's wide
// arithmetic must decide them as the in-memory algorithms do. Limits stay below 2^50 here: the
// Redis clients' reply decoders round integers near 2^53 (issue 17 item 11).
const hugeRules = fc
  .record({
    limit: fc.oneof(fc.constantFrom(1_000_000_000, 100_000_000, 999_999_999_989, 2 ** 50 - 1), fc.integer({ min: 1, max: 2 ** 50 })),
    windowMs: fc.oneof(fc.constantFrom(86_400_000, 604_800_000, 3_600_000, Rule.MAX_WINDOW_MS), fc.integer({ min: 20_000, max: Rule.MAX_WINDOW_MS })),
  })
  .filter(({ limit, windowMs }) => limit * windowMs > Number.MAX_SAFE_INTEGER)
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

/** One call of a trace: how far the clock moves before it, its key, and its share of the limit. */
export const step = fc.record({
  // Mostly small moves, sometimes a window or two, sometimes backwards; quarters of a ms too.
  moveMs: fc.oneof(
    fc.constant(0),
    fc.integer({ min: 1, max: 3_000 }),
    fc.integer({ min: 0, max: 400_000 }),
    fc.integer({ min: -5_000, max: -1 }),
    fc.integer({ min: -4_000, max: 4_000 }).map((q) => q / 4),
    fc.integer({ min: 0, max: 2 ** 43 }),
  ),
  key: fc.constantFrom('a', 'b', 'c'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
});

const startMs = fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 }));
const traces = fc.record({ startMs, steps: fc.array(step, { minLength: 1, maxLength: 30, size: 'max' }) });
// Past 2^53 the in-memory algorithms are exact on whole-ms readings only (on fractional ones their
// wide products are rounded doubles, where PostgreSQL's numeric stays exact): whole moves there.
const wholeMsTraces = traces.map(({ startMs, steps }) => ({ startMs, steps: steps.map((step) => ({ ...step, moveMs: Math.trunc(step.moveMs) })) }));
// Long enough to span several batches (at most 16 decisions go in one Redis round trip, 4 in PostgreSQL).
const longTraces = fc.record({ startMs, steps: fc.array(step, { minLength: 1, maxLength: 100, size: 'max' }) });

type Trace = { startMs: number; steps: { moveMs: number; key: string; share: number }[] };

/** RATEKEEPER_NUM_RUNS raises every store's runs for a long local soak. */
const soakRuns = process.env.RATEKEEPER_NUM_RUNS === undefined ? undefined : Number(process.env.RATEKEEPER_NUM_RUNS);

/** Keeps a fixed-window reading out of the last second of its window (moving it to the boundary), so no key lives less than 1 s. */
function awayFromWindowEnd(nowMs: number, windowMs: number): number {
  const end = (Math.floor(nowMs / windowMs) + 1) * windowMs;
  return end - nowMs < 1_000 ? end : nowMs;
}

/**
 * Walks a trace: the in-memory twin decides each step at once; the store is asked one call at a
 * time, each awaited before the clock moves on ('awaited'), or all in one tick ('one tick'), or one
 * call per macrotask without waiting for the answers ('macrotasks': on Redis, calls join the next
 * round while one is in flight), the ManualClock moving between calls, so that one batch carries a
 * different reading per call.
 */
async function replay(store: OpenStore, algorithm: RedisAlgorithm, rule: Rule, trace: Trace, mode: 'awaited' | 'one tick' | 'macrotasks') {
  const clock = new ManualClock(trace.startMs);
  // One algorithm per key, never forgotten: a keyed limiter may forget a key that is idle at a
  // later reading, which a backwards step would then expose.
  const memory = new Map<string, RateLimitAlgorithm>();
  const limiter = store.limiter({ algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('same'), timeoutMs: 5_000 });
  const fromMemory: Decision[] = [];
  const fromStore: Promise<Decision>[] = [];
  for (const { moveMs, key, share } of trace.steps) {
    const nowMs = clock.now() + moveMs;
    clock.set(algorithm === 'fixed-window' ? awayFromWindowEnd(nowMs, rule.windowMs) : nowMs);
    const permits = 1 + Math.floor(share * (rule.limit - 1));
    if (!memory.has(key)) memory.set(key, new twins[algorithm](rule));
    fromMemory.push(memory.get(key)!.tryAcquire(clock.now(), permits));
    const decision = limiter.tryAcquire(key, permits);
    if (mode === 'awaited') await decision;
    if (mode === 'macrotasks') await new Promise((resolve) => setImmediate(resolve));
    fromStore.push(decision);
  }
  return { fromMemory, fromStore: await Promise.all(fromStore) };
}

// Traces mixing every operation of API.md "Managing keys and settling costs" with decisions. Blocks
// last at least 10 s: a store expires a blocked key on its own clock, and a trace takes far less.
const operationStep = fc.record({
  moveMs: step.map(({ moveMs }) => moveMs),
  key: fc.constantFrom('a', 'b', 'c'),
  op: fc.constantFrom(
    'acquire',
    'acquire',
    'acquire',
    'peek',
    'peek0',
    'reset',
    'charge',
    'charge',
    'reserve',
    'reserve',
    'settle',
    'settle',
    'cancel',
    'block',
    'again',
  ),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
  blockMs: fc.oneof(fc.integer({ min: 10_000, max: 400_000 }), fc.constantFrom(10_000, 2 ** 42)),
  huge: fc.boolean(),
});
const operationTraces = fc.record({ startMs, steps: fc.array(operationStep, { minLength: 1, maxLength: 40, size: 'max' }) });
// Past 2^53, whole-ms readings (see wholeMsTraces).
const wholeMsOperationTraces = operationTraces.map(({ startMs, steps }) => ({ startMs, steps: steps.map((step) => ({ ...step, moveMs: Math.trunc(step.moveMs) })) }));

type OperationTrace = { startMs: number; steps: { moveMs: number; key: string; op: string; share: number; pick: number; blockMs: number; huge: boolean }[] };

/** A settled promise as a value, so that the same failure on both sides compares equal. */
async function outcome(promise: Promise<unknown>): Promise<unknown> {
  try {
    const value = await promise;
    return value === undefined ? 'done' : value;
  } catch (error) {
    return { failed: (error as { code?: string }).code ?? String(error) };
  }
}

/** A synchronous call's outcome, as {@link outcome} reads a promise's. */
function outcomeOf(call: () => unknown): Promise<unknown> {
  try {
    return outcome(Promise.resolve(call()));
  } catch (error) {
    return outcome(Promise.reject(error));
  }
}

/**
 * Walks a trace of mixed operations, each awaited: the in-memory twin is a KeyedRateLimiter on a
 * ManualClock, and the store's limiter reads the same readings the keyed limiter decides on (a
 * reading earlier than the latest counts as the latest there). Reservations are settled or
 * cancelled later in the trace, some twice. Every answer of both sides is returned, in order.
 */
async function replayOperations(store: OpenStore, algorithm: RedisAlgorithm, rule: Rule, trace: OperationTrace) {
  const clock = new ManualClock(trace.startMs);
  let latest = -Infinity;
  const readings: Clock = { now: () => (latest = Math.max(latest, clock.now())) };
  const memory = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
  const limiter = store.limiter({ algorithm, rule, onStoreError: 'deny', clock: readings, prefix: uniquePrefix('operations'), timeoutMs: 5_000 }) as AccountingLimiter;
  const reservations: { memory: Reservation; store: AsyncReservation; permits: number }[] = [];
  const fromMemory: unknown[] = [];
  const fromStore: unknown[] = [];
  const both = async (inMemory: () => unknown, inStore: () => Promise<unknown>) => {
    fromMemory.push(await outcomeOf(inMemory));
    fromStore.push(await outcome(inStore()));
  };
  for (const { moveMs, key, op, share, pick, blockMs, huge } of trace.steps) {
    const nowMs = clock.now() + moveMs;
    clock.set(algorithm === 'fixed-window' ? awayFromWindowEnd(nowMs, rule.windowMs) : nowMs);
    const permits = 1 + Math.floor(share * (rule.limit - 1));
    const reservation = reservations.length === 0 ? undefined : reservations[pick % reservations.length]!;
    if (op === 'acquire') await both(() => memory.tryAcquire(key, permits), () => limiter.tryAcquire(key, permits));
    else if (op === 'peek') await both(() => memory.peek(key, permits), () => limiter.peek(key, permits));
    else if (op === 'peek0') await both(() => memory.peek(key, 0), () => limiter.peek(key, 0));
    else if (op === 'reset') await both(() => memory.reset(key), () => limiter.reset(key));
    else if (op === 'block') await both(() => memory.block(key, blockMs), () => limiter.block(key, blockMs));
    else if (op === 'charge') {
      const charged = huge ? Number.MAX_SAFE_INTEGER : 1 + Math.floor(share * 3 * rule.limit);
      await both(() => memory.charge(key, charged), () => limiter.charge(key, charged));
    } else if (op === 'reserve') {
      const inMemory = await outcomeOf(() => memory.reserve(key, permits));
      const inStore = await outcome(limiter.reserve(key, permits));
      // A reservation compares by its decision; a failure (a rule that keeps no receipts) by its code.
      const decision = (reserved: unknown) => (reserved as Partial<Reservation>).decision ?? reserved;
      fromMemory.push(decision(inMemory));
      fromStore.push(decision(inStore));
      if ('decision' in (inMemory as object) && 'decision' in (inStore as object)) {
        reservations.push({ memory: inMemory as Reservation, store: inStore as AsyncReservation, permits });
      }
    } else if (reservation !== undefined) {
      // 'settle', 'cancel' and 'again' (a reservation settled or cancelled once more) of one made earlier.
      const actual = Math.floor(share * 2 * reservation.permits);
      if (op === 'cancel') await both(() => reservation.memory.cancel(), () => reservation.store.cancel());
      else await both(() => reservation.memory.settle(actual), () => reservation.store.settle(actual));
    }
  }
  // Afterwards every key decides alike, whatever the trace left in it.
  for (const key of ['a', 'b', 'c']) await both(() => memory.peek(key, 0), () => limiter.peek(key, 0));
  return { fromMemory, fromStore };
}

const TIMEOUT_MS = 150;

/** Runs the whole conformance suite against one store. */
export function storeConformance(store: StoreUnderTest): void {
  describe.skipIf(!store.available)(`${store.name}: the store conformance suite`, { timeout: 60_000 }, () => {
    let open: OpenStore;
    beforeAll(async () => {
      open = await store.open();
    }, 60_000);
    afterAll(() => open?.close());
    const numRuns = soakRuns ?? store.numRuns ?? 50;

    for (const algorithm of algorithmNames) {
      test.prop([rules, traces], { numRuns })(`${algorithm}: same clock readings, same decisions as in memory`, async (rule, trace) => {
        const { fromMemory, fromStore } = await replay(open, algorithm, rule, trace, 'awaited');
        expect(fromStore).toStrictEqual(fromMemory);
      });

      // The log stores one entry per permit in memory and over Redis until it is stored per grant
      // (issue 17 item 5): huge requests would not fit. Its arithmetic is sums of times.
      if (algorithm !== 'sliding-window-log') {
        test.prop([hugeRules, wholeMsTraces], { numRuns })(`${algorithm}: rules past 2^53 decide as in memory`, async (rule, trace) => {
          const { fromMemory, fromStore } = await replay(open, algorithm, rule, trace, 'awaited');
          expect(fromStore).toStrictEqual(fromMemory);
        });
      }

      test.prop([rules, longTraces], { numRuns })(`${algorithm}: a whole trace asked for in one tick (batched) decides as the same calls one by one`, async (rule, trace) => {
        const { fromMemory, fromStore } = await replay(open, algorithm, rule, trace, 'one tick');
        expect(fromStore).toStrictEqual(fromMemory);
      });

      test.prop([rules, longTraces], { numRuns })(
        `${algorithm}: calls one per macrotask (on Redis, batched across callbacks) decide as the same calls one by one`,
        async (rule, trace) => {
          const { fromMemory, fromStore } = await replay(open, algorithm, rule, trace, 'macrotasks');
          expect(fromStore).toStrictEqual(fromMemory);
        },
      );
    }

    // A window of 10^12 ms (until 2033 for the aligned windows) so that nothing refills during a
    // test: the count allowed must then be exactly the limit, on the server's clock.
    test.each(algorithmNames)('%s: 200 calls at once for 10 permits, exactly 10 pass', async (algorithm) => {
      const limiter = open.limiter({ algorithm, rule: new Rule(10, 1e12), onStoreError: 'deny', prefix: uniquePrefix('burst'), timeoutMs: 5_000 });
      const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.tryAcquire('hot')));
      expect(decisions.filter((decision) => decision.degraded !== undefined)).toEqual([]);
      const allowed = decisions.filter((decision) => decision.allowed);
      expect(allowed.map((decision) => decision.remaining).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    });

    // Only lower bounds of time, which load cannot break: sleeping longer only makes the key newer.
    // That the store kept the spending (the full limit refused until resetAfterMs) is checked only
    // when our two readings, between which both server readings fall, are less than resetAfterMs
    // apart: a loaded machine may space them further, and an aligned fixed window may end right
    // after the first call. (A 1-permit tryAcquire there raced a bucket's refill or the window's end.)
    test.each(algorithmNames)('%s: on the server clock a key is as new once its resetAfterMs has passed', async (algorithm) => {
      const limiter = open.limiter({ algorithm, rule: new Rule(2, 500), onStoreError: 'deny', prefix: uniquePrefix('expiry'), timeoutMs: 5_000 }) as AccountingLimiter;
      const started = performance.now();
      const first = await limiter.tryAcquire('k', 2);
      expect(first).toMatchObject({ allowed: true, remaining: 0 });
      // peek spends nothing: should it come after the key is new again, the last check still holds.
      const kept = await limiter.peek('k', 2);
      // The store's clock may count a millisecond more than ours; 5 ms cover it.
      if (performance.now() - started < first.resetAfterMs - 5) expect(kept).toMatchObject({ allowed: false, remaining: 0 });
      await new Promise((resolve) => setTimeout(resolve, first.resetAfterMs + 5));
      expect(await limiter.tryAcquire('k', 2)).toStrictEqual(expect.objectContaining({ allowed: true, remaining: 0 }));
    });

    test.each(algorithmNames)('%s: the data gone (keys and cached scripts) is a reset: the key starts over, and the limiter keeps working', async (algorithm) => {
      const prefix = uniquePrefix(`gone-${algorithm}`);
      const limiter = open.limiter({ algorithm, rule: new Rule(3, 60_000), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
      expect(await limiter.tryAcquire('k', 3)).toMatchObject({ allowed: true, remaining: 0 });
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, remaining: 0 });
      await open.wipe(prefix);
      expect(await limiter.tryAcquire('k')).toStrictEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
      expect(await limiter.tryAcquire('k', 2)).toMatchObject({ allowed: true, remaining: 0 });
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false });
    });

    describe('accounting operations: peek, reset, charge, reserve and settle, block', () => {
      for (const algorithm of algorithmNames) {
        test.prop([rules, operationTraces], { numRuns })(`${algorithm}: traces mixing every operation decide as the in-memory KeyedRateLimiter`, async (rule, trace) => {
          const { fromMemory, fromStore } = await replayOperations(open, algorithm, rule, trace);
          expect(fromStore).toStrictEqual(fromMemory);
        });

        if (algorithm !== 'sliding-window-log') {
          test.prop([hugeRules, wholeMsOperationTraces], { numRuns })(`${algorithm}: rules past 2^53, traces mixing every operation decide as in memory`, async (rule, trace) => {
            const { fromMemory, fromStore } = await replayOperations(open, algorithm, rule, trace);
            expect(fromStore).toStrictEqual(fromMemory);
          });
        }
      }

      // Twice a limit past 2^52 passes 2^53: the bound stops at 2^53 - 1, so every count stays exact,
      // and the charge that reaches it voids the reservation made before (its permits may be what was dropped).
      test.each(['fixed-window', 'sliding-window-counter'] as const)('%s: a limit past 2^52 in debt stays exact, its bound at 2^53 - 1', async (algorithm) => {
        const limit = Number.MAX_SAFE_INTEGER;
        const rule = new Rule(limit, 3_600_000);
        const clock = new ManualClock(0);
        const memory = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
        const limiter = open.limiter({ algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('bound'), timeoutMs: 5_000 }) as AccountingLimiter;
        const settled = async (target: KeyedRateLimiter | AccountingLimiter) => {
          await target.tryAcquire('k', limit - 10);
          const reservation = await target.reserve('k', 10);
          await target.charge('k', 6);
          await reservation.cancel();
          return [await target.peek('k', 0), await target.peek('k')];
        };
        const fromMemory = await settled(memory);
        expect(fromMemory[0]).toMatchObject({ allowed: true, remaining: 0 });
        expect(fromMemory[1]).toMatchObject({ allowed: false, remaining: 0 });
        expect(await settled(limiter)).toStrictEqual(fromMemory);
      });

      test.each(algorithmNames)('%s: login protection over the store (peek, charge, block, reset)', async (algorithm) => {
        const limiter = open.limiter({ algorithm, rule: new Rule(3, 3_600_000), onStoreError: 'deny', prefix: uniquePrefix('login'), timeoutMs: 5_000 }) as AccountingLimiter;
        expect(await limiter.peek('alice', 0)).toStrictEqual({ allowed: true, limit: 3, remaining: 3, retryAfterMs: 0, resetAfterMs: 0 });
        for (let failure = 0; failure < 3; failure++) await limiter.charge('alice', 1);
        expect(await limiter.peek('alice')).toMatchObject({ allowed: false, remaining: 0 });
        await limiter.block('alice', 86_400_000);
        const blocked = await limiter.tryAcquire('alice');
        expect(blocked).toMatchObject({ allowed: false, remaining: 0 });
        expect(blocked.retryAfterMs).toBeGreaterThan(86_400_000 - 60_000);
        await limiter.reset('alice');
        expect(await limiter.peek('alice', 0)).toStrictEqual({ allowed: true, limit: 3, remaining: 3, retryAfterMs: 0, resetAfterMs: 0 });
      });

      // Issue 13: a refund measured its debt against refill alone, and B's refund had already given
      // back part of what A's grant left short (a twin that never reserved A holds 2).
      test.each(algorithmNames)('%s: reserve B, reserve A, cancel B, refill, spend, cancel A: decides as in memory, a bucket no better off than without A', async (algorithm) => {
        const rule = new Rule(10, 10_000);
        const clock = new ManualClock(0);
        const memory = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
        const limiter = open.limiter({ algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('overtaken'), timeoutMs: 5_000 }) as AccountingLimiter;
        const b = [memory.reserve('k', 5), await limiter.reserve('k', 5)] as const;
        const a = [memory.reserve('k', 5), await limiter.reserve('k', 5)] as const;
        expect(a[1].decision).toStrictEqual(a[0].decision);
        b[0].cancel();
        await b[1].cancel();
        clock.advance(3_000);
        expect(await limiter.tryAcquire('k', 8)).toStrictEqual(memory.tryAcquire('k', 8));
        a[0].cancel();
        await a[1].cancel();
        const now = await limiter.peek('k', 0);
        expect(now).toStrictEqual(memory.peek('k', 0));
        if (algorithm === 'token-bucket' || algorithm === 'leaky-bucket') expect(now.remaining).toBe(2);
      });

      test.each(algorithmNames)("%s: issue 24's example: ten reservations of 1000 on perMinute(10 000) settled last first (odd ones cancelled, even ones at 500) decide as in memory, a bucket left at 7500", async (algorithm) => {
        const rule = Rule.perMinute(10_000);
        const clock = new ManualClock(1_700_000_000_000);
        const memory = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
        const limiter = open.limiter({ algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('overlapping'), timeoutMs: 5_000 }) as AccountingLimiter;
        const reservations = [];
        for (let i = 0; i < 10; i++) reservations.push([memory.reserve('k', 1000), await limiter.reserve('k', 1000)] as const);
        for (let i = 9; i >= 0; i--) {
          const [twin, stored] = reservations[i]!;
          if (i % 2 === 1) {
            twin.cancel();
            await stored.cancel();
          } else {
            twin.settle(500);
            await stored.settle(500);
          }
        }
        const now = await limiter.peek('k', 0);
        expect(now).toStrictEqual(memory.peek('k', 0));
        if (algorithm === 'token-bucket' || algorithm === 'leaky-bucket') expect(now.remaining).toBe(7500);
      });

      test.each(algorithmNames)('%s: a reservation cancelled at once gives back everything, and settles once', async (algorithm) => {
        const limiter = open.limiter({ algorithm, rule: new Rule(10, 1e12), onStoreError: 'deny', prefix: uniquePrefix('cancel'), timeoutMs: 5_000 }) as AccountingLimiter;
        const reservation = await limiter.reserve('k', 4);
        expect(reservation.decision).toMatchObject({ allowed: true, remaining: 6 });
        await reservation.cancel();
        await expect(reservation.cancel()).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
        expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 10 });
      });
    });

    describe('a store out of reach: the outage policy answers within timeoutMs, marked degraded, and onError hears the cause', () => {
      // While the store is out of reach, the fallback holds this server to 1 permit a minute.
      const policies: [string, () => StoreErrorPolicy, boolean[]][] = [
        ['deny', () => 'deny', [false, false]],
        ['allow', () => 'allow', [true, true]],
        ['a fallback limiter', () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(1, 60_000)) }), [true, false]],
      ];
      test.each(policies)('%s', async (_name, policy, expected) => {
        const errors: unknown[] = [];
        const onStoreError = policy();
        const limiter = open.unreachable({ algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError, prefix: uniquePrefix('outage'), timeoutMs: TIMEOUT_MS, onError: (error) => errors.push(error) });
        for (const allowed of expected) {
          const started = performance.now();
          const decision = await limiter.tryAcquire('k');
          expect(performance.now() - started).toBeLessThan(HANG_MS);
          expect(decision.allowed).toBe(allowed);
          expect(['store-error', 'store-timeout']).toContain(decision.degraded);
        }
        expect(errors).toHaveLength(expected.length);
        expect(errors.every((error) => error instanceof Error)).toBe(true);
      });

      // Every store answers a peek alike while out of reach: the state now under 'deny' is none
      // left (never refused: no block is known), 'allow' answers as for one permit, and a fallback
      // limiter is asked its own peek.
      test('a peek spends nothing, in the fallback too, and the state now is never refused', async () => {
        const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(1, 60_000)) });
        const unreachable = (onStoreError: StoreErrorPolicy) =>
          open.unreachable({ algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError, prefix: uniquePrefix('outage'), timeoutMs: TIMEOUT_MS }) as AccountingLimiter;
        expect(await unreachable('deny').peek('k', 0)).toMatchObject({ allowed: true, remaining: 0, retryAfterMs: 0 });
        expect(await unreachable('deny').peek('k')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 12_000 });
        expect(await unreachable('allow').peek('k', 0)).toMatchObject({ allowed: true, remaining: 4 });
        const limiter = unreachable(fallback);
        expect(await limiter.peek('k', 0)).toMatchObject({ allowed: true, remaining: 1, resetAfterMs: 0 });
        expect(await limiter.peek('k')).toMatchObject({ allowed: true, remaining: 0 });
        expect(fallback.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
        expect(await limiter.peek('k')).toMatchObject({ allowed: false, degraded: expect.any(String) });
      });
    });
  });
}
