// In-flight limits over PostgreSQL, the SQL called directly (src/postgres/sql/leases.ts): a key's
// leases and its rate decide together, as the in-memory `Composite([<algorithm>, Concurrency])` does
// (or `Concurrency` alone), under random reserve/settle/cancel/extend/peek/block/reset traces with the
// caller's clock readings, backwards ones included.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import type { Receipt } from '../../src/algorithms/accounting';
import { type AccountingAlgorithm, Composite, Concurrency, type Decision, ManualClock, Rule } from '../../src/index';
import { reject } from '../../src/core/decision';
import type { PostgresAlgorithm } from '../../src/postgres/plans';
import { receiptId } from '../../src/postgres/protocol';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { postgresPort } from '../stores/support/postgres-store';
import { leaseCalls } from './helpers/lease-calls';
import { migratedSchema } from './helpers/schema';

// Windows and leases of 20 s and more where the row's expiry slack comes from them: rows expire on
// the server's clock, which moves a few seconds per run while the caller's stands still.
const rules = fc.record({ limit: fc.integer({ min: 1, max: 8 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));
const concurrencies = (minLeaseMs: number) =>
  fc.record({ limit: fc.integer({ min: 1, max: 5 }), leaseMs: fc.integer({ min: minLeaseMs, max: 100_000 }) }).map(({ limit, leaseMs }) => new Concurrency(limit, { leaseMs }));
const step = fc.record({
  // Now and then backwards: an earlier reading counts as no time passing. Far too (a clock 2^41 ms
  // off): a part's clock is then far ahead of the call's, which the wait search must cross in few steps.
  moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 0, max: 120_000 }), fc.integer({ min: -30_000, max: -1 }), fc.integer({ min: -(2 ** 41), max: 2 ** 41 })),
  op: fc.constantFrom('reserve', 'reserve', 'reserve', 'settle', 'settle', 'extend', 'peek', 'peek0', 'block', 'reset'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
});
type Trace = { startMs: number; steps: { moveMs: number; op: string; share: number; pick: number }[] };
const traces = fc.record({ startMs: fc.integer({ min: 0, max: 1_900_000_000_000 }), steps: fc.array(step, { minLength: 1, maxLength: 40 }) });

type State = Composite | Concurrency;
type Held = { readonly decision: Decision; readonly state: State; readonly receipt: Receipt | undefined };

/**
 * One key as `KeyedRateLimiter` keeps it (its settle: release the lease, give back or charge the
 * rates; blocks by the reading), without the keyed limiter's clamp of every reading to the latest
 * of all its keys, nor its forgetting of idle keys: a store keeps time per key, and a reset key
 * starts from no time at all (as the store conformance suite's twins, test/stores/conformance.ts).
 */
class Twin {
  #state: State;
  #until = -Infinity;
  readonly #fresh: () => State;

  constructor(fresh: () => State) {
    this.#fresh = fresh;
    this.#state = fresh();
  }

  peek(now: number, permits: number): Decision {
    return this.#blocked(now, this.#state.peek(now, permits));
  }

  reserve(now: number, permits: number): Held {
    if (this.#until > now) return { decision: this.peek(now, permits), state: this.#state, receipt: undefined };
    const { decision, receipt } = this.#state.reserve(now, permits);
    return { decision, state: this.#state, receipt };
  }

  settle(now: number, held: Held, reserved: number, actual: number): Decision {
    const state = this.#state;
    state.release(now, held.receipt!);
    if (state === held.state) state.refund(now, held.receipt!, actual < reserved ? reserved - actual : 0);
    if (actual > reserved) for (const part of state instanceof Composite ? state.parts : []) if (!(part instanceof Concurrency)) (part as AccountingAlgorithm).charge(now, actual - reserved);
    return state.peek(now, 0);
  }

  extend(now: number, held: Held, ms: number): boolean {
    return this.#state.extend(now, held.receipt!, ms);
  }

  block(now: number, ms: number): void {
    this.#until = Math.max(this.#until, now + ms);
  }

  reset(): void {
    this.#state = this.#fresh();
    this.#until = -Infinity;
  }

  #blocked(now: number, alone: Decision): Decision {
    if (this.#until <= now) return alone;
    const left = Math.ceil(this.#until - now);
    return reject(alone.limit, 0, Math.max(left, alone.retryAfterMs), Math.max(left, alone.resetAfterMs));
  }
}

describe.skipIf(!postgresPort)('in-flight limits in the SQL (lease functions)', () => {
  const made = migratedSchema('leases');

  const run = async (algorithm: PostgresAlgorithm | undefined, concurrency: Concurrency, rule: Rule, { startMs, steps }: Trace) => {
    const clock = new ManualClock(startMs);
    const sql = leaseCalls(made.pool, made.schema, algorithm, `${Math.random()}:`, concurrency, rule);
    const twin = new Twin(() => {
      const inFlight = new Concurrency(concurrency.limit, { leaseMs: concurrency.leaseMs });
      return algorithm === undefined ? inFlight : new Composite([new twins[algorithm](rule) as AccountingAlgorithm, inFlight]);
    });
    const most = algorithm === undefined ? concurrency.limit : Math.min(rule.limit, concurrency.limit);
    const open: { id: number; permits: number; held: Held }[] = [];
    for (const [i, { moveMs, op, share, pick }] of steps.entries()) {
      clock.set(Math.max(0, clock.now() + moveMs));
      const now = clock.now();
      const permits = 1 + Math.floor(share * (most - 1));
      const at = `step ${i}: ${op} at ${now}`;
      if (op === 'reserve') {
        const id = receiptId();
        const held = twin.reserve(now, permits);
        expect(await sql.reserve('k', permits, now, id), at).toStrictEqual(held.decision);
        if (held.decision.allowed) open.push({ id, permits, held });
      } else if (op === 'settle' && open.length > 0) {
        const [{ id, permits: reserved, held }] = open.splice(pick % open.length, 1) as [(typeof open)[number]];
        // Less, as much or more than reserved.
        const actual = Math.floor(share * (2 * reserved + 1));
        expect(await sql.settle('k', reserved, actual, now, id), at).toStrictEqual(twin.settle(now, held, reserved, actual));
      } else if (op === 'extend' && open.length > 0) {
        const { id, held } = open[pick % open.length]!;
        const ms = share < 0.9 ? 1 + Math.floor(share * 100_000) : 2 ** 41;
        expect(await sql.extend('k', ms, now, id), at).toBe(twin.extend(now, held, ms));
      } else if (op === 'peek' || op === 'peek0') {
        const n = op === 'peek0' ? 0 : permits;
        expect(await sql.peek('k', n, now), at).toStrictEqual(twin.peek(now, n));
      } else if (op === 'block') {
        const ms = Math.floor(share * 60_000);
        await sql.block('k', ms, now);
        twin.block(now, ms);
      } else if (op === 'reset') {
        await sql.reset('k');
        twin.reset();
      }
    }
    expect(await sql.peek('k', 0, clock.now())).toStrictEqual(twin.peek(clock.now(), 0));
  };

  for (const algorithm of algorithmNames) {
    test.prop([rules, concurrencies(1), traces], { numRuns: 40 })(`${algorithm} beside Concurrency: every decision and extension equals Composite([${algorithm}, Concurrency])'s`, (rule, concurrency, trace) =>
      run(algorithm, concurrency, rule, trace),
    );
  }

  test.prop([concurrencies(20_000), traces], { numRuns: 40 })('Concurrency alone: every decision and extension equals its in-memory twin\'s', (concurrency, trace) =>
    run(undefined, concurrency, new Rule(1, 1), trace),
  );
});
