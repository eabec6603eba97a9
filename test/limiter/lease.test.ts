import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import {
  ClosedError,
  Composite,
  Concurrency,
  KeyedRateLimiter,
  ManualScheduler,
  observe,
  pace,
  RateLimitedError,
  Rule,
  TokenBucket,
  type ChangeEvent,
  type DecisionEvent,
  type Lease,
} from '../../src/index';

/** Lets every promise callback queued so far run: no timer fires, no macrotask passes. */
async function microtasks(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

/** A promise's outcome as far as it has come: what it resolved with, the error it rejected with, or 'pending'. */
function track<T>(promise: Promise<T>): { readonly state: 'pending' | 'resolved' | 'rejected'; readonly value: T | undefined; readonly error: unknown } {
  const outcome = { state: 'pending' as 'pending' | 'resolved' | 'rejected', value: undefined as T | undefined, error: undefined as unknown };
  promise.then(
    (value) => Object.assign(outcome, { state: 'resolved', value }),
    (error: unknown) => Object.assign(outcome, { state: 'rejected', error }),
  );
  return outcome;
}

const twoAtOnce = (scheduler: ManualScheduler, leaseMs = 60_000) =>
  new KeyedRateLimiter({ algorithm: () => new Concurrency(2, { leaseMs }), clock: scheduler });

type Step = { readonly kind: 'lease'; readonly permits: number; readonly key: number } | { readonly kind: 'settle'; readonly pick: number } | { readonly kind: 'advance'; readonly ms: number };

const stepsArb = fc.array(
  fc.oneof(
    fc.record({ kind: fc.constant('lease' as const), permits: fc.integer({ min: 1, max: 3 }), key: fc.integer({ min: 0, max: 1 }) }),
    fc.record({ kind: fc.constant('settle' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 120 }) }),
  ),
  { maxLength: 40, size: 'max' },
);

describe('KeyedRateLimiter.lease with a Concurrency limit', () => {
  test.prop([fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 300 }), stepsArb])(
    'never more than limit held per key; waiters granted in FIFO order, woken by the release or the lease end, never by polling',
    async (limit, leaseMs, steps) => {
      const scheduler = new ManualScheduler();
      const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(limit, { leaseMs }), clock: scheduler });
      interface Call {
        readonly key: string;
        readonly permits: number;
        readonly order: number;
        lease: Lease | undefined;
        grantedAt: number;
      }
      const calls: Call[] = [];
      const held: Call[] = [];
      const granted: Call[] = [];
      /** Permits held by each key now, as the callers see them: granted, not settled, lease not ended. */
      const inFlight = (key: string) =>
        held.filter((call) => call.key === key && scheduler.now() < call.grantedAt + leaseMs).reduce((sum, call) => sum + call.permits, 0);
      for (const step of steps) {
        if (step.kind === 'lease') {
          const call: Call = { key: `k${step.key}`, permits: Math.min(step.permits, limit), order: calls.length, lease: undefined, grantedAt: -1 };
          calls.push(call);
          limiter.lease(call.key, call.permits).then(
            (lease) => {
              expect(lease.decision.allowed).toBe(true);
              Object.assign(call, { lease, grantedAt: scheduler.now() });
              held.push(call);
              granted.push(call);
            },
            (error: unknown) => expect(error).toBeInstanceOf(ClosedError), // still waiting at the end
          );
        } else if (step.kind === 'settle') {
          const call = held.splice(step.pick % (held.length + 1), 1)[0];
          call?.lease?.settle(call.permits);
        } else {
          // Time moves one ms at a time: a lease ending at t wakes its waiter at t, no later.
          for (let i = 0; i < step.ms; i++) {
            scheduler.advance(1);
            await microtasks();
            for (const key of ['k0', 'k1']) expect(inFlight(key)).toBeLessThanOrEqual(limit);
          }
        }
        await microtasks();
        for (const key of ['k0', 'k1']) {
          expect(inFlight(key)).toBeLessThanOrEqual(limit);
          // Woken at once: a waiter whose permits are free now is not left waiting (FIFO: only the first in line may go).
          const first = calls.find((call) => call.key === key && call.lease === undefined);
          if (first !== undefined) expect(inFlight(key) + first.permits).toBeGreaterThan(limit);
        }
      }
      for (const key of ['k0', 'k1']) {
        const order = granted.filter((call) => call.key === key).map((call) => call.order);
        expect(order).toEqual([...order].sort((a, b) => a - b));
      }
      // No timer but the lines' own (one per waiting key): nothing polls.
      expect(scheduler.pending).toBeLessThanOrEqual(2);
      limiter.close();
      expect(scheduler.pending).toBe(0);
    },
  );

  it('wakes the next waiter in the same macrotask as the release', async () => {
    const scheduler = new ManualScheduler();
    const limiter = twoAtOnce(scheduler);
    const first = await limiter.lease('k');
    await limiter.lease('k');
    const third = track(limiter.lease('k'));
    await microtasks();
    expect(third.state).toBe('pending');
    expect(first.settle(1)).toEqual({ allowed: true, limit: 2, remaining: 1, retryAfterMs: 0, resetAfterMs: 60_000 });
    await microtasks();
    expect(third.state).toBe('resolved');
    expect(third.value?.decision).toEqual({ allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: 60_000 });
  });

  it('gives a crashed holder\'s permits back at exactly grant + leaseMs, waking the waiter then', async () => {
    const scheduler = new ManualScheduler(1000);
    const limiter = twoAtOnce(scheduler, 5000);
    await limiter.lease('k', 2); // never settled: the holder crashed
    expect(limiter.peek('k')).toEqual({ allowed: false, limit: 2, remaining: 0, retryAfterMs: 5000, resetAfterMs: 5000 });
    const next = track(limiter.lease('k'));
    scheduler.advance(4999);
    await microtasks();
    expect(next.state).toBe('pending');
    scheduler.advance(1);
    await microtasks();
    expect(next.state).toBe('resolved');
    expect(next.value?.decision.allowed).toBe(true);
  });

  it('holds an extended lease past leaseMs, and says when a lease already ended', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(1, { leaseMs: 1000 }), clock: scheduler });
    const lease = await limiter.lease('k');
    scheduler.advance(900);
    expect(lease.extend(1000)).toBe(true); // now held until 1900
    scheduler.advance(999);
    expect(limiter.peek('k')).toMatchObject({ allowed: false, retryAfterMs: 1 });
    scheduler.advance(1);
    expect(limiter.peek('k').allowed).toBe(true);
    expect(lease.extend(1000)).toBe(false); // ended: its permit may be someone else's
    expect(() => lease.extend(0)).toThrow(RangeError);
    lease.settle(1);
    expect(() => lease.extend(1000)).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' }));
    const forever = await limiter.lease('k');
    expect(forever.extend(Infinity)).toBe(true);
    scheduler.advance(2 ** 42);
    expect(limiter.peek('k')).toMatchObject({ allowed: false, retryAfterMs: 2 ** 42 });
    forever.cancel();
    expect(limiter.peek('k').allowed).toBe(true);
  });

  it('resolves ungranted at exactly maxWaitMs when no release comes, and granted when one does', async () => {
    const scheduler = new ManualScheduler();
    const limiter = twoAtOnce(scheduler);
    const a = await limiter.lease('k');
    await limiter.lease('k');
    // The lease ends in 60 s, yet a release may come any moment: it waits its 500 ms.
    const late = track(limiter.lease('k', 1, { maxWaitMs: 500 }));
    const behind = track(limiter.lease('k', 1, { maxWaitMs: 800 }));
    scheduler.advance(499);
    await microtasks();
    expect(late.state).toBe('pending');
    scheduler.advance(1);
    await microtasks();
    expect(late.state).toBe('resolved');
    expect(late.value?.decision).toEqual({ allowed: false, limit: 2, remaining: 0, retryAfterMs: 59_500, resetAfterMs: 59_500 });
    expect(late.value?.settle(1)).toEqual(late.value?.decision); // ungranted: nothing to settle
    scheduler.advance(100);
    a.cancel();
    await microtasks();
    expect(behind.state).toBe('resolved');
    expect(behind.value?.decision.allowed).toBe(true);
    expect(scheduler.pending).toBe(0);
  });

  it('answers at once when a rate part proves the wait longer than maxWaitMs', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([new TokenBucket(Rule.perMinute(1)), new Concurrency(2)]),
      clock: scheduler,
    });
    (await limiter.lease('k')).settle(1);
    const refused = track(limiter.lease('k', 1, { maxWaitMs: 1000 }));
    await microtasks();
    expect(refused.state).toBe('resolved');
    expect(refused.value?.decision).toMatchObject({ allowed: false, retryAfterMs: 60_000 });
  });

  it('answers at once when a block outlasts maxWaitMs, and waits out a shorter one', async () => {
    const scheduler = new ManualScheduler();
    const limiter = twoAtOnce(scheduler);
    limiter.block('k', 5000);
    const refused = track(limiter.lease('k', 1, { maxWaitMs: 1000 }));
    await microtasks();
    expect(refused.value?.decision).toMatchObject({ allowed: false, limit: 2, remaining: 0, retryAfterMs: 5000 });
    const patient = track(limiter.lease('k', 1, { maxWaitMs: 6000 }));
    scheduler.advance(4999);
    await microtasks();
    expect(patient.state).toBe('pending');
    scheduler.advance(1);
    await microtasks();
    expect(patient.value?.decision.allowed).toBe(true);
  });

  it('refuses a new key a full table cannot hold (key-table-full), and admits it once a held key is released', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([new TokenBucket(Rule.perSecond(10)), new Concurrency(2, { leaseMs: 1000 })]),
      clock: scheduler,
      maxKeys: 1,
    });
    const held = await limiter.lease('a');
    expect(limiter.reserve('b').decision).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    expect(limiter.peek('b')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    held.settle(1);
    scheduler.advance(100); // the bucket has refilled its one token: 'a' is idle
    expect((await limiter.lease('b')).decision.allowed).toBe(true);
    expect(limiter.size).toBe(1);
  });

  it('leaves the line on abort, holding nothing, and the next moves up', async () => {
    const scheduler = new ManualScheduler();
    const limiter = twoAtOnce(scheduler);
    const a = await limiter.lease('k', 2);
    const controller = new AbortController();
    const aborted = track(limiter.lease('k', 2, { signal: controller.signal }));
    const next = track(limiter.lease('k', 1));
    controller.abort(new Error('client went away'));
    await microtasks();
    expect(aborted.state).toBe('rejected');
    expect((aborted.error as Error).message).toBe('client went away');
    a.settle(2);
    await microtasks();
    expect(next.state).toBe('resolved');
    expect(limiter.peek('k', 0).remaining).toBe(1);
    const already = new AbortController();
    already.abort(new Error('before'));
    await expect(limiter.lease('other', 1, { signal: already.signal })).rejects.toThrow('before');
  });

  it('rejects every waiter with a ClosedError on close(), holding nothing, and every later lease', async () => {
    const scheduler = new ManualScheduler();
    const limiter = twoAtOnce(scheduler);
    await limiter.lease('k', 2);
    const waiting = [track(limiter.lease('k')), track(limiter.lease('k', 1, { maxWaitMs: 1000 }))];
    limiter.close();
    await microtasks();
    for (const waiter of waiting) {
      expect(waiter.state).toBe('rejected');
      expect(waiter.error).toBeInstanceOf(ClosedError);
    }
    expect(scheduler.pending).toBe(0);
    await expect(limiter.lease('fresh')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_CLOSED' });
    expect(limiter.reserve('fresh').decision.allowed).toBe(true); // calls that do not wait keep answering
  });

  it('answers one waiter more than maxWaiters at once with the refusal marked queue-full', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(1), clock: scheduler, maxWaiters: 1 });
    await limiter.lease('k');
    void limiter.lease('k');
    const full = await limiter.lease('k');
    expect(full.decision).toMatchObject({ allowed: false, degraded: 'queue-full' });
  });

  it('cannot tryAcquire, charge or acquire an in-flight limit: nobody could release the grant', async () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new Composite([new TokenBucket(Rule.perMinute(10)), new Concurrency(2)]) });
    expect(() => limiter.tryAcquire('k')).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' }));
    expect(() => limiter.charge('k', 1)).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' }));
    await expect(limiter.acquire('k')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    await limiter.lease('k', 2);
    void limiter.lease('k');
    // Behind a line too, at once rather than at its turn.
    await expect(limiter.acquire('k')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    await expect(limiter.lease('k', 3)).rejects.toThrow(RangeError);
  });

  it('keeps the actual cost on the rate and releases the in-flight permits on settle; cancel returns everything', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([new TokenBucket(Rule.perMinute(100)), new Concurrency(200)]),
      clock: scheduler,
    });
    // The bucket binds (fewer left than the 200 in-flight permits), so the key's state is the rate's.
    const rate = (key: string) => limiter.peek(key, 0);
    const a = await limiter.lease('a', 5);
    expect(a.settle(3)).toMatchObject({ limit: 100, remaining: 97 }); // 2 refunded, all 5 released
    const b = await limiter.lease('b', 5);
    b.settle(8); // 3 more charged on the rate, none on the in-flight part
    expect(rate('b')).toMatchObject({ limit: 100, remaining: 92 });
    const c = await limiter.lease('c', 5);
    c.cancel();
    expect(rate('c')).toEqual({ allowed: true, limit: 100, remaining: 100, retryAfterMs: 0, resetAfterMs: 0 });
    // The in-flight part is free in each: as many may be leased at once as the rate has left.
    expect((await limiter.lease('a', 97)).decision).toMatchObject({ allowed: true, remaining: 0 });
    expect((await limiter.lease('c', 100)).decision).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('drops the leases on reset and carries them over a reconfiguration, each ending when it would have', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(2, { leaseMs: 1000 }), clock: scheduler });
    const held = await limiter.lease('k', 2);
    limiter.reset('k');
    expect(limiter.peek('k', 0).remaining).toBe(2);
    expect(held.extend(1000)).toBe(false);
    held.settle(2); // gives nothing to the fresh key
    expect(limiter.peek('k', 0).remaining).toBe(2);

    const kept = await limiter.lease('k', 2);
    scheduler.advance(400);
    limiter.reconfigure(() => new Composite([new TokenBucket(Rule.perMinute(10)), new Concurrency(3, { leaseMs: 5000 })]));
    expect(limiter.peek('k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(limiter.peek('k', 2)).toMatchObject({ allowed: false, retryAfterMs: 600 }); // ends at 1000, as granted
    kept.settle(2); // released where the lease is now
    expect(limiter.peek('k', 3).allowed).toBe(true);
  });

  it('on a limiter without a Concurrency part, waits as acquire does, then reserves', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: scheduler });
    limiter.tryAcquire('k', 2);
    const acquired = track(limiter.acquire('k'));
    const leased = track(limiter.lease('k'));
    scheduler.advance(500);
    await microtasks();
    expect(acquired.state).toBe('resolved');
    expect(leased.state).toBe('pending'); // FIFO with acquire's callers
    scheduler.advance(500);
    await microtasks();
    expect(leased.value?.decision).toEqual({ allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 });
    expect(leased.value?.extend(10)).toBe(true); // nothing in flight that could end
    leased.value?.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(1);
  });
});

describe('observe with leases', () => {
  it('reports a lease\'s decision to onDecision and its release to onChange', async () => {
    const scheduler = new ManualScheduler();
    const decisions: DecisionEvent[] = [];
    const changes: ChangeEvent[] = [];
    const limiter = observe(twoAtOnce(scheduler), { name: 'llm', onDecision: (e) => decisions.push(e), onChange: (e) => changes.push(e) });
    const a = await limiter.lease('k');
    const b = await limiter.lease('k');
    const refused = await limiter.lease('k', 1, { maxWaitMs: 0 });
    expect(decisions.map((e) => [e.key, e.permits, e.allowed])).toEqual([['k', 1, true], ['k', 1, true], ['k', 1, false]]);
    expect(a.extend(1000)).toBe(true);
    a.settle(1);
    b.cancel();
    refused.cancel();
    expect(changes).toEqual([
      { name: 'llm', key: 'k', operation: 'settle', permits: 1, durationMs: undefined, decision: { allowed: true, limit: 2, remaining: 1, retryAfterMs: 0, resetAfterMs: 60_000 } },
      { name: 'llm', key: 'k', operation: 'cancel', permits: 0, durationMs: undefined, decision: undefined },
    ]);
  });
});

describe('pace with an in-flight limit', () => {
  it('runs at most two calls at once, in call order, releasing on resolve and on reject; a rejection keeps the rate cost', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([new TokenBucket(Rule.perMinute(8)), new Concurrency(2)]),
      clock: scheduler,
    });
    const finish: (() => void)[] = [];
    let running = 0;
    let most = 0;
    const started: number[] = [];
    const task = pace(
      (i: number) => {
        started.push(i);
        most = Math.max(most, ++running);
        return new Promise<number>((resolve, reject) => finish.push(() => (running--, i % 2 === 0 ? resolve(i) : reject(new Error(`task ${i}`)))));
      },
      { limiter, key: 'user-1' },
    );
    const results = Array.from({ length: 6 }, (_, i) => task(i).catch((error: Error) => error.message));
    await microtasks();
    expect(started).toEqual([0, 1]);
    while (finish.length > 0) {
      finish.shift()?.();
      await microtasks();
    }
    expect(await Promise.all(results)).toEqual([0, 'task 1', 2, 'task 3', 4, 'task 5']);
    expect(started).toEqual([0, 1, 2, 3, 4, 5]);
    expect(most).toBe(2);
    // Six calls happened, rejected or not: six spent on the minute (the bucket binds, the first part
    // on a tie with the two in-flight permits free again).
    expect(limiter.peek('user-1', 0)).toMatchObject({ limit: 8, remaining: 2 });
    expect((await limiter.lease('user-1', 2)).decision.allowed).toBe(true);
  });

  it('rejects a call that would wait past maxWaitMs with a RateLimitedError', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(1), clock: scheduler });
    const never = pace(() => new Promise<void>(() => {}), { limiter, key: 'k', maxWaitMs: 100 });
    void never();
    const second = track(never());
    scheduler.advance(100);
    await microtasks();
    expect(second.error).toBeInstanceOf(RateLimitedError);
  });
});
