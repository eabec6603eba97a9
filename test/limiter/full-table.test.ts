import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, ManualScheduler, Rule, SlidingWindowLog, TokenBucket, type AccountingAlgorithm, type Decision, type Reservation } from '../../src/index';
import { algorithms, composites } from '../support/algorithms';

// A table at `maxKeys`: what a new key is answered, by every call that can meet one.

const kinds = [...algorithms, ...composites];

type Op =
  | { readonly kind: 'check'; readonly key: number; readonly permits: number; readonly dt: number }
  | { readonly kind: 'charge'; readonly key: number; readonly permits: number }
  | { readonly kind: 'reserve'; readonly key: number; readonly permits: number }
  | { readonly kind: 'settle'; readonly which: number; readonly actual: number }
  | { readonly kind: 'block'; readonly key: number; readonly durationMs: number }
  | { readonly kind: 'reset'; readonly key: number }
  | { readonly kind: 'reconfigure'; readonly algorithm: number; readonly limit: number; readonly windowMs: number }
  | { readonly kind: 'evict' };

const keyArb = fc.integer({ min: 0, max: 6 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 10, arbitrary: fc.record({ kind: fc.constant('check' as const), key: keyArb, permits: fc.integer({ min: 0, max: 3 }), dt: fc.integer({ min: -20, max: 300 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('charge' as const), key: keyArb, permits: fc.integer({ min: 1, max: 8 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('reserve' as const), key: keyArb, permits: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('settle' as const), which: fc.nat(), actual: fc.integer({ min: 0, max: 5 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('block' as const), key: keyArb, durationMs: fc.integer({ min: 0, max: 500 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reset' as const), key: keyArb }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('reconfigure' as const), algorithm: fc.integer({ min: 0, max: kinds.length - 1 }), limit: fc.integer({ min: 3, max: 5 }), windowMs: fc.integer({ min: 1, max: 400 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('evict' as const) }) },
);

describe('a full table', () => {
  test.prop([fc.integer({ min: 0, max: kinds.length - 1 }), fc.integer({ min: 1, max: 4 }), fc.array(opArb, { maxLength: 120, size: 'max' })], { numRuns: 400 })(
    'peek(k, n) deep-equals tryAcquire(k, n) in every state, full tables included, and changes no later decision',
    (first, maxKeys, ops) => {
      const clock = new ManualClock(1_764_000_000_000);
      const make = () => new KeyedRateLimiter({ algorithm: () => (kinds[first] as (typeof kinds)[number]).make(new Rule(3, 200)), clock, maxKeys });
      const limiter = make();
      const twin = make(); // driven the same way, never peeked
      const reservations: [Reservation, Reservation][] = [];
      // A blocked key is never reclaimed, so with blocks, which idle keys happened to be reclaimed
      // before (a peek reclaims none) decides whether a blocked one holds a slot, and the twin may
      // part ways with the limiter. Without blocks every decision must agree.
      const blocks = ops.some((op) => op.kind === 'block');
      const same = (a: Decision, b: Decision) => blocks || expect(a).toEqual(b);
      for (const op of ops) {
        if (op.kind === 'check') {
          clock.set(clock.now() + op.dt);
          const key = `k${op.key}`;
          const size = limiter.size;
          const peeked = limiter.peek(key, op.permits);
          expect(limiter.size).toBe(size);
          if (op.permits === 0) {
            same(peeked, twin.peek(key, 0)); // the twin reads the clock too: readings may go back
            // The state now: refused only while blocked, or (as a new key's refusal) when the key could not be stored.
            if (peeked.degraded === 'key-table-full') expect(peeked).toEqual(limiter.peek(key, 1));
            if (!peeked.allowed) expect(peeked.remaining).toBe(0);
            continue;
          }
          const decided = limiter.tryAcquire(key, op.permits);
          expect(peeked).toEqual(decided);
          same(decided, twin.tryAcquire(key, op.permits));
        } else if (op.kind === 'charge') {
          const charged = limiter.charge(`k${op.key}`, op.permits);
          same(charged, twin.charge(`k${op.key}`, op.permits));
          if (charged.degraded === 'key-table-full') expect(charged).toMatchObject({ allowed: false, remaining: 0 });
        } else if (op.kind === 'reserve') {
          const pair: [Reservation, Reservation] = [limiter.reserve(`k${op.key}`, op.permits), twin.reserve(`k${op.key}`, op.permits)];
          same(pair[0].decision, pair[1].decision);
          reservations.push(pair);
        } else if (op.kind === 'settle') {
          const pair = reservations.splice(op.which % Math.max(1, reservations.length), 1)[0];
          if (pair !== undefined) same(pair[0].settle(op.actual), pair[1].settle(op.actual));
        } else if (op.kind === 'block') {
          limiter.block(`k${op.key}`, op.durationMs);
          twin.block(`k${op.key}`, op.durationMs);
        } else if (op.kind === 'reset') {
          limiter.reset(`k${op.key}`);
          twin.reset(`k${op.key}`);
        } else if (op.kind === 'reconfigure') {
          const algorithm = () => (kinds[op.algorithm] as (typeof kinds)[number]).make(new Rule(op.limit, op.windowMs));
          limiter.reconfigure(algorithm);
          twin.reconfigure(algorithm);
        } else {
          // Which idle keys are still resident may differ (a peek reclaims none): only decisions must agree.
          limiter.evictIdle();
          twin.evictIdle();
        }
      }
    },
  );

  it('refuses a new key to peek, charge and reserve alike, so the login recipe cannot let failures through', () => {
    const clock = new ManualClock();
    const failures = new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(new Rule(3, 60_000)), clock, maxKeys: 2 });
    failures.charge('a', 1);
    failures.charge('b', 1);
    const refusal: Decision = { allowed: false, limit: 3, remaining: 0, retryAfterMs: 60_000, resetAfterMs: 60_000, degraded: 'key-table-full' };
    expect(failures.tryAcquire('victim')).toEqual(refusal);
    expect(failures.peek('victim')).toEqual(refusal);
    expect(failures.peek('victim', 0)).toEqual(refusal);
    expect(failures.charge('victim', 1)).toEqual(refusal);
    expect(failures.reserve('victim').decision).toEqual(refusal);
    expect(failures.size).toBe(2);
    // The recipe: a password is checked only while peek allows, and each failure is charged.
    let evaluated = 0;
    for (let attempt = 0; attempt < 100; attempt++) {
      if (!failures.peek('victim').allowed) continue;
      evaluated++;
      failures.charge('victim', 1);
    }
    expect(evaluated).toBe(0);
  });

  it('admits a newcomer in place of a key a refund made idle', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(10)), clock, maxKeys: 2 });
    limiter.tryAcquire('a');
    limiter.tryAcquire('b');
    expect(limiter.tryAcquire('c').degraded).toBe('key-table-full'); // the table now orders its keys by idle time
    clock.advance(6000); // a and b are full again
    limiter.reserve('x', 10).cancel(); // x takes a's place, and is given everything back: idle at once
    expect(limiter.tryAcquire('y')).toMatchObject({ allowed: true });
    expect(limiter.tryAcquire('z')).toMatchObject({ allowed: true });
    expect(limiter.size).toBe(2);
  });

  const idleOpArb = fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constantFrom('acquire' as const, 'peek' as const, 'charge' as const, 'reserve' as const), key: keyArb, permits: fc.integer({ min: 1, max: 3 }), dt: fc.integer({ min: -20, max: 300 }) }) },
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('settle' as const), key: fc.constant(0), permits: fc.integer({ min: 0, max: 4 }), dt: fc.integer({ min: 0, max: 100 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('reset' as const, 'block' as const), key: keyArb, permits: fc.integer({ min: 0, max: 300 }), dt: fc.constant(0) }) },
  );

  test.prop([fc.integer({ min: 0, max: kinds.length - 1 }), fc.integer({ min: 1, max: 4 }), fc.array(idleOpArb, { maxLength: 150, size: 'max' })], { numRuns: 300 })(
    'a newcomer is refused as key-table-full only when no resident key is idle, however the keys became idle (refund, settle, reset)',
    (first, maxKeys, ops) => {
      const clock = new ManualClock(1_764_000_000_000);
      const limiter = new KeyedRateLimiter({ algorithm: () => (kinds[first] as (typeof kinds)[number]).make(new Rule(3, 200)), clock, maxKeys });
      const reservations: Reservation[] = [];
      for (const { kind, key, permits, dt } of ops) {
        clock.set(clock.now() + dt);
        let decision: Decision | undefined;
        if (kind === 'acquire') decision = limiter.tryAcquire(`k${key}`, permits);
        else if (kind === 'peek') decision = limiter.peek(`k${key}`, permits);
        else if (kind === 'charge') decision = limiter.charge(`k${key}`, permits);
        else if (kind === 'reserve') {
          const reservation = limiter.reserve(`k${key}`, permits);
          reservations.push(reservation);
          decision = reservation.decision;
        } else if (kind === 'settle') reservations.shift()?.settle(permits);
        else if (kind === 'reset') limiter.reset(`k${key}`);
        else limiter.block(`k${key}`, permits);
        // evictIdle at the same reading removes exactly the idle keys not blocked: none may be left behind a refusal.
        if (decision?.degraded === 'key-table-full') expect(limiter.evictIdle()).toBe(0);
      }
    },
  );

  it('finds a key idle again once the line that kept it ends, though it stopped looking at it while waited on', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: scheduler, maxKeys: 1 });
    limiter.tryAcquire('a');
    limiter.block('a', 10_000);
    const abort = new AbortController();
    const waiting = limiter.acquire('a', 1, { signal: abort.signal });
    scheduler.advance(600); // 'a' is full again, but blocked and waited on
    expect(limiter.tryAcquire('b').degraded).toBe('key-table-full');
    abort.abort(new Error('gave up'));
    await expect(waiting).rejects.toThrow('gave up');
    scheduler.advance(200);
    expect(limiter.tryAcquire('c').degraded).toBe('key-table-full'); // still blocked
    scheduler.advance(9200); // the block has ended
    expect(limiter.tryAcquire('d')).toMatchObject({ allowed: true });
  });

  /** A token bucket that counts every call made on it: the work a newcomer makes the table do. */
  let calls = 0;
  const spy = (rule: Rule): AccountingAlgorithm => {
    const inner = new TokenBucket(rule);
    return new Proxy(inner, {
      get(target, name) {
        const value = Reflect.get(target, name) as unknown;
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => (calls++, (value as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
  };

  const KEYS = 1000;
  const states: Record<string, (limiter: KeyedRateLimiter, scheduler: ManualScheduler) => Promise<void> | void> = {
    'blocked and idle': (limiter, scheduler) => {
      for (let i = 0; i < KEYS; i++) limiter.block(`k${i}`, 3_600_000);
      scheduler.advance(360_000); // every bucket is full again (a token comes back each 6 minutes); the blocks last an hour
    },
    'active for an hour': () => {},
    'waited on': async (limiter) => {
      for (let i = 0; i < KEYS; i++) {
        limiter.tryAcquire(`k${i}`, 9);
        void limiter.acquire(`k${i}`, 10); // waits an hour for its tenth token
      }
      await Promise.resolve();
    },
    'refunded, then used again': (limiter) => {
      for (let i = 0; i < KEYS; i++) {
        limiter.reserve(`k${i}`, 5).cancel();
        limiter.tryAcquire(`k${i}`);
      }
    },
  };

  for (const [name, bring] of Object.entries(states)) {
    it(`a newcomer costs a bounded number of steps whatever the keys' state: ${KEYS} resident keys ${name}`, async () => {
      const scheduler = new ManualScheduler(1_764_000_000_000);
      const limiter = new KeyedRateLimiter({ algorithm: (key) => (key.startsWith('k') ? spy(Rule.perHour(10)) : new TokenBucket(Rule.perHour(10))), clock: scheduler, maxKeys: KEYS });
      for (let i = 0; i < KEYS; i++) limiter.tryAcquire(`k${i}`);
      expect(limiter.tryAcquire('first').degraded).toBe('key-table-full'); // the table orders its keys (one pass)
      await bring(limiter, scheduler);
      expect(limiter.tryAcquire('second').degraded).toBe('key-table-full'); // each key looked at once more at most
      let most = 0;
      for (let ms = 0; ms < 200; ms++) {
        scheduler.advance(1);
        calls = 0;
        expect(limiter.tryAcquire(`new${ms}`).degraded).toBe('key-table-full');
        most = Math.max(most, calls);
      }
      // One look at the first key in line at most; one per resident key and ms was 1000 calls a newcomer.
      expect(most).toBeLessThanOrEqual(3);
      limiter.close();
    });
  }
});
