// Exact refunds over PostgreSQL with overlapping reservations (D4 of issue 24): once every
// reservation is settled, the key is as the twin that reserved, at the same moments, only what each
// kept, in any settlement order, with plain traffic and charges in between. A bucket's refund is
// bounded by the lowest deficit since its grant (each receipt keeps its segment's lowest, the bound
// is the least from it on); before, a receipt held only the deficit its grant left less the refill
// since, and overlapping reservations settled last-granted-first gave back far less than they
// should (the example: 4500 left where 7500 is right).
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { type AsyncReservation, KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { PostgresRateLimiter } from '../../src/postgres';
import { MAX_RECEIPTS } from '../../src/store/constants';
import { algorithmNames, twins } from '../redis/helpers/algorithms';
import { postgresPort } from '../stores/support/postgres-store';
import { migratedSchema } from './helpers/schema';

// Windows of 20 s and more: rows expire on the server's clock, which moves a few seconds per run.
const rules = fc.record({ limit: fc.integer({ min: 1, max: 30 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));
const step = fc.record({
  moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 0, max: 100_000 })),
  op: fc.constantFrom('reserve', 'reserve', 'reserve', 'settle', 'settle', 'acquire', 'charge'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
});
const traces = fc.record({ startMs: fc.integer({ min: 0, max: 1_900_000_000_000 }), steps: fc.array(step, { minLength: 1, maxLength: 40 }), order: fc.array(fc.nat(), { maxLength: 40 }) });

describe.skipIf(!postgresPort)('exact refunds over PostgreSQL', () => {
  const made = migratedSchema('refunds');

  const limiterOf = (algorithm: (typeof algorithmNames)[number], rule: Rule, clock: ManualClock) =>
    new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm, rule, onStoreError: 'deny', clock, prefix: `${Math.random()}:` });

  test('the design note\'s worked check: A 5, B 3, refill to a deficit of 2, C 4; cancelling A gives back 2, then B nothing: as the twin that reserved only C', async () => {
    const clock = new ManualClock(0);
    const limiter = limiterOf('token-bucket', new Rule(10, 10_000), clock);
    const a = await limiter.reserve('k', 5);
    const b = await limiter.reserve('k', 3);
    clock.advance(6_000);
    await limiter.reserve('k', 4);
    await a.cancel();
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 6 });
    await b.cancel();
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 6 });
  });

  test.each(['token-bucket', 'fixed-window'] as const)(`%s: a key keeps ${MAX_RECEIPTS} receipts: the oldest beyond them is voided, its refund gives nothing`, async (algorithm) => {
    const clock = new ManualClock(0);
    const limiter = limiterOf(algorithm, new Rule(1000, 1_000_000_000), clock);
    const reservations: AsyncReservation[] = [];
    for (let i = 0; i <= MAX_RECEIPTS; i++) reservations.push(await limiter.reserve('k', 1));
    await reservations[0]!.cancel();
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 1000 - MAX_RECEIPTS - 1 });
    await reservations[1]!.cancel();
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 1000 - MAX_RECEIPTS });
  });

  test.each(['token-bucket', 'sliding-window-log'] as const)('%s: a settle at or past what was reserved releases its receipt: it no longer counts toward the bound', async (algorithm) => {
    const clock = new ManualClock(0);
    const limiter = limiterOf(algorithm, new Rule(1000, 1_000_000_000), clock);
    const first = await limiter.reserve('k', 1);
    const others: AsyncReservation[] = [];
    for (let i = 1; i < MAX_RECEIPTS; i++) others.push(await limiter.reserve('k', 1));
    await others[0]!.settle(1);
    await others[1]!.settle(3);
    await limiter.reserve('k', 1);
    await limiter.reserve('k', 1);
    // 64 outstanding: the first is still held, and its cancel gives its permit back.
    const before = (await limiter.peek('k', 0)).remaining;
    await first.cancel();
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: before + 1 });
  });

  test.each(['token-bucket', 'fixed-window'] as const)('%s: a call under another rule voids the receipts: a refund after it gives nothing', async (algorithm) => {
    const clock = new ManualClock(0);
    const prefix = `${Math.random()}:`;
    const options = { client: made.pool, schema: made.schema, algorithm, onStoreError: 'deny', clock, prefix } as const;
    const limiter = new PostgresRateLimiter({ ...options, rule: new Rule(10, 600_000) });
    const reservation = await limiter.reserve('k', 4);
    const other = new PostgresRateLimiter({ ...options, rule: new Rule(20, 600_000) });
    expect(await other.tryAcquire('k', 1)).toMatchObject({ remaining: 15 });
    await reservation.cancel();
    expect(await other.peek('k', 0)).toMatchObject({ remaining: 15 });
  });

  for (const algorithm of algorithmNames) {
    test.prop([rules, traces], { numRuns: 40 })(
      `${algorithm}: overlapping reservations settled in any order, plain traffic and charges between, leave the key as the twin that reserved only what each kept`,
      async (rule, { startMs, steps, order }) => {
        const clock = new ManualClock(startMs);
        const limiter = limiterOf(algorithm, rule, clock);
        // What the twin does, in time order: charges of what each call kept (a grant, when it fits,
        // leaves exactly the state a charge of its permits does), replayed once all is settled.
        const events: { at: number; permits: number; kept?: { permits: number } }[] = [];
        const open: { reservation: AsyncReservation; permits: number; kept: { permits: number } }[] = [];
        const settle = async (index: number, share: number) => {
          const [{ reservation, permits, kept }] = open.splice(index % open.length, 1) as [(typeof open)[number]];
          kept.permits = Math.min(permits, Math.floor(share * (permits + 1)));
          await reservation.settle(kept.permits);
        };
        for (const { moveMs, op, share, pick } of steps) {
          clock.advance(moveMs);
          const permits = 1 + Math.floor(share * (rule.limit - 1));
          if (op === 'reserve') {
            const reservation = await limiter.reserve('k', permits);
            if (!reservation.decision.allowed) continue;
            const kept = { permits };
            open.push({ reservation, permits, kept });
            events.push({ at: clock.now(), permits: 0, kept });
          } else if (op === 'settle' && open.length > 0) {
            await settle(pick, share);
          } else if (op === 'acquire') {
            if ((await limiter.tryAcquire('k', permits)).allowed) events.push({ at: clock.now(), permits });
          } else if (op === 'charge') {
            // Never into debt: a charge past the debt bound voids receipts, leaving the key worse off than the twin.
            const { remaining } = await limiter.peek('k', 0);
            const charged = Math.min(permits, remaining);
            if (charged > 0) {
              await limiter.charge('k', charged);
              events.push({ at: clock.now(), permits: charged });
            }
          }
        }
        for (const pick of order) if (open.length > 0) await settle(pick, 0.5);
        while (open.length > 0) await settle(0, 0);
        const end = clock.now();
        const twinClock = new ManualClock(startMs);
        const twin = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock: twinClock });
        for (const { at, permits, kept } of events) {
          twinClock.set(at);
          const spent = kept?.permits ?? permits;
          if (spent > 0) twin.charge('k', spent);
        }
        for (const later of [0, 1_000, rule.windowMs / 2]) {
          twinClock.set(end + later);
          clock.set(end + later);
          expect(await limiter.peek('k', 0), `at end + ${later}`).toStrictEqual(twin.peek('k', 0));
        }
      },
    );
  }
});
