// DESIGN-24 D2 over Redis: a key's state remembers its rule, and a call under another rule carries
// the key's usage over at that call exactly as KeyedRateLimiter.reconfigure does. The twin is one
// in-memory KeyedRateLimiter per key, reconfigured when that key's rule changes. Several
// RedisRateLimiters of one name and algorithm with different rules share every key (the key names
// no rule), so each call chooses its key's rule by the limiter it is made through. A settle or
// cancel goes under the rule its reservation was made under, and never changes the key's rule: it
// acts under the key's own, as the twin's settle after a reconfigure refunds nothing and keeps it.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { type AsyncReservation, type Decision, KeyedRateLimiter, ManualClock, type Reservation, Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

const rule = fc.record({ limit: fc.integer({ min: 1, max: 30 }), windowMs: fc.integer({ min: 1_000, max: 120_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));

const step = fc.record({
  moveMs: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 1, max: 5_000 }), fc.integer({ min: 0, max: 200_000 })),
  key: fc.constantFrom('a', 'b'),
  rule: fc.nat({ max: 2 }),
  op: fc.constantFrom('acquire', 'acquire', 'acquire', 'charge', 'block', 'peek', 'peek0', 'reserve', 'reserve', 'settle', 'settle', 'cancel'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
});

describe.skipIf(!redisPort)('rules per key over Redis: a key carries its usage over to its new rule as reconfigure does', () => {
  const redis = useIoredis();

  for (const algorithm of algorithmNames) {
    test.prop([fc.array(rule, { minLength: 3, maxLength: 3 }), fc.array(step, { minLength: 1, maxLength: 30 })], { numRuns: 40 })(
      `${algorithm}: every decision is the twin's, one in-memory limiter per key reconfigured when the key's rule changes`,
      async (rules, steps) => {
        const clock = new ManualClock(1_700_000_000_000);
        const prefix = uniquePrefix('rules');
        const limiters = rules.map((r) => new RedisRateLimiter({ client: redis, algorithm, rule: r, onStoreError: 'deny', clock, prefix, name: 'shared', timeoutMs: 5_000 }));
        const keys = new Map<string, { rule: Rule; twin: KeyedRateLimiter }>();
        const twinOf = (key: string, r: Rule) => {
          let entry = keys.get(key);
          if (entry === undefined) {
            entry = { rule: r, twin: new KeyedRateLimiter({ algorithm: () => new twins[algorithm](r), clock }) };
            keys.set(key, entry);
          } else if (entry.rule.limit !== r.limit || entry.rule.windowMs !== r.windowMs) {
            entry.rule = r;
            entry.twin.reconfigure(() => new twins[algorithm](r));
          }
          return entry.twin;
        };
        const store: (Decision | string)[] = [];
        const memory: (Decision | string)[] = [];
        const reservations: { store: AsyncReservation; memory: Reservation; rule: Rule; key: string; permits: number }[] = [];
        for (const { moveMs, key, rule: index, op, share, pick } of steps) {
          clock.advance(moveMs);
          if (op === 'settle' || op === 'cancel') {
            // Made under the reservation's rule, whatever the key's is now (a refund looks up none).
            const held = reservations.splice(pick % Math.max(1, reservations.length), 1)[0];
            if (held === undefined) continue;
            if (op === 'cancel') {
              await held.store.cancel();
              held.memory.cancel();
              // The key's state after, under its own rule (a peek under another answers as carried over).
              const own = keys.get(held.key)!;
              store.push(await limiters[rules.indexOf(own.rule)]!.peek(held.key, 0));
              memory.push(own.twin.peek(held.key, 0));
              continue;
            }
            const actual = Math.floor(share * 2 * held.permits);
            // Past what was reserved the excess is a charge: a call through the reservation's limiter, under its rule.
            if (actual > held.permits) twinOf(held.key, held.rule);
            store.push(await held.store.settle(actual));
            memory.push(held.memory.settle(actual));
            continue;
          }
          // A peek writes nothing, so it is made under the key's current rule (a peek under another
          // rule answers as carried over, but the carry happens at the key's next write).
          const r = op.startsWith('peek') ? (keys.get(key)?.rule ?? rules[index]!) : rules[index]!;
          const limiter = limiters[rules.indexOf(r)]!;
          const twin = twinOf(key, r);
          const permits = 1 + Math.floor(share * (r.limit - 1));
          if (op === 'acquire') {
            store.push(await limiter.tryAcquire(key, permits));
            memory.push(twin.tryAcquire(key, permits));
          } else if (op === 'reserve') {
            const held = { store: await limiter.reserve(key, permits), memory: twin.reserve(key, permits), rule: r, key, permits };
            store.push(held.store.decision);
            memory.push(held.memory.decision);
            if (held.store.decision.allowed && held.memory.decision.allowed) reservations.push(held);
          } else if (op === 'charge') {
            const charged = 1 + Math.floor(share * 2 * r.limit);
            store.push(await limiter.charge(key, charged));
            memory.push(twin.charge(key, charged));
          } else if (op === 'block') {
            const duration = 1_000 + Math.floor(share * 60_000);
            await limiter.block(key, duration);
            twin.block(key, duration);
            store.push('blocked');
            memory.push('blocked');
          } else {
            const asked = op === 'peek0' ? 0 : permits;
            store.push(await limiter.peek(key, asked));
            memory.push(twin.peek(key, asked));
          }
        }
        expect(store).toStrictEqual(memory);
      },
    );
  }

  test.each(algorithmNames)('%s: a peek under another rule answers as carried over and writes nothing', async (algorithm) => {
    const clock = new ManualClock(1_700_000_000_000);
    const prefix = uniquePrefix('peek-carry');
    const before = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(10, 60_000), onStoreError: 'deny', clock, prefix, name: 'n' });
    const after = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(4, 10_000), onStoreError: 'deny', clock, prefix, name: 'n' });
    await before.tryAcquire('k', 6);
    const read = () => (algorithm === 'sliding-window-log' ? redis.zrange(`${prefix}n:${algorithm}:k`, '0', '-1', 'WITHSCORES') : redis.getBuffer(`${prefix}n:${algorithm}:k`));
    const stored = await read();
    const twin = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](new Rule(10, 60_000)), clock });
    twin.tryAcquire('k', 6);
    twin.reconfigure(() => new twins[algorithm](new Rule(4, 10_000)));
    expect(await after.peek('k', 0)).toStrictEqual(twin.peek('k', 0));
    expect(await after.peek('k', 1)).toStrictEqual(twin.peek('k', 1));
    expect(await read()).toStrictEqual(stored);
  });
});
