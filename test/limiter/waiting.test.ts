// KeyedRateLimiter.acquire: src/limiter/wait-queue.ts and wait-line.ts over a synchronous limiter,
// with the option checks of src/limiter/acquire-options.ts.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualScheduler, Rule, TokenBucket, type Decision } from '../../src/index';
import { type AlgorithmCase, algorithms, boundName, type Grant, recording, worstExcess } from '../support/algorithms';
import { HANG_MS } from '../support/hang';
import { rangeError, typeError } from '../../src/core/errors';

// acquire() on the keyed limiter, driven by a ManualScheduler: time moves only when the test moves
// it, and each wait's timer fires at its exact due time. Nothing sleeps.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

const ruleArb = fc
  .record({ limit: fc.integer({ min: 1, max: 6 }), windowMs: fc.oneof(fc.constantFrom(1000, 7), fc.integer({ min: 1, max: 3000 })) })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

interface Caller {
  readonly dt: number;
  readonly permits: number;
  readonly abortAfter?: number | null;
  readonly maxWaitMs?: number | null;
}

/** Callers on one key: each arrives `dt` after the previous one; some may abort or set a deadline. */
const callersArb = (extra: 'abort' | 'maxWait' | 'none') =>
  ruleArb.chain((rule) => {
    const wait = fc.option(fc.integer({ min: 0, max: 3 * rule.windowMs }), { nil: null });
    return fc.record({
      rule: fc.constant(rule),
      callers: fc.array(
        fc.record({
          dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2 * rule.windowMs })),
          permits: fc.integer({ min: 1, max: rule.limit }),
          abortAfter: extra === 'abort' ? wait : fc.constant(null),
          maxWaitMs: extra === 'maxWait' ? wait : fc.constant(null),
        }),
        { minLength: 1, maxLength: 10 },
      ),
    });
  });

interface Outcome {
  readonly arrivedAt: number;
  decision?: Decision;
  grantedAt?: number;
  error?: unknown;
}

/** Plays the callers through a fresh limiter and waits until nobody waits; reports each caller's fate. */
async function play({ make }: AlgorithmCase, rule: Rule, callers: readonly Caller[], start = 1_000_000) {
  const scheduler = new ManualScheduler(start);
  const grants: Grant[] = [];
  const limiter = new KeyedRateLimiter({ algorithm: () => recording(make(rule), grants), clock: scheduler });
  const outcomes: Outcome[] = [];
  const grantedInOrder: number[] = [];
  const settled = callers.map(({ dt, permits, abortAfter, maxWaitMs }, i) => {
    scheduler.advance(dt);
    const outcome: Outcome = { arrivedAt: scheduler.now() };
    outcomes.push(outcome);
    const controller = new AbortController();
    if (abortAfter != null) scheduler.setTimeout(() => controller.abort(`reason ${i}`), abortAfter);
    const options = maxWaitMs == null ? { signal: controller.signal } : { signal: controller.signal, maxWaitMs };
    return limiter.acquire('k', permits, options).then(
      (decision) => {
        outcome.decision = decision;
        if (decision.allowed) grantedInOrder.push(i);
      },
      (error: unknown) => {
        outcome.error = error;
      },
    );
  });
  while (scheduler.pending > 0) scheduler.advance(rule.windowMs);
  await Promise.all(settled);
  // Grants are logged as the algorithm makes them and callers resolve in the same order.
  grantedInOrder.forEach((i, j) => {
    (outcomes[i] as Outcome).grantedAt = (grants[j] as Grant).at;
  });
  return { outcomes, grants, grantedInOrder, scheduler };
}

/**
 * Checks each granted caller against the model of a fair line: a caller's turn comes when it has
 * arrived and everyone before it has left (granted, or aborted); it is granted right then if its
 * permits fit, else after exactly the retryAfterMs the algorithm gives. The model spends only what
 * the granted callers took.
 */
function expectServedInTurn({ make }: AlgorithmCase, rule: Rule, callers: readonly Caller[], outcomes: readonly Outcome[], grants: readonly Grant[]) {
  const model = make(rule);
  let left = -Infinity;
  const expected: Grant[] = [];
  callers.forEach(({ permits, abortAfter }, i) => {
    const outcome = outcomes[i] as Outcome;
    if (outcome.error !== undefined) {
      left = Math.max(left, outcome.arrivedAt + (abortAfter as number));
      return;
    }
    let turn = Math.max(left, outcome.arrivedAt);
    const first = model.tryAcquire(turn, permits);
    if (!first.allowed) {
      turn += first.retryAfterMs;
      expect(model.tryAcquire(turn, permits).allowed).toBe(true);
    }
    expected.push({ at: turn, permits });
    left = turn;
  });
  expect(grants).toEqual(expected);
}

describe.each(algorithms)('waiting with $name', (algorithm) => {
  test.prop([callersArb('none')])(
    'waiting grants in FIFO order, each as soon as its turn comes and its permits fit, never beyond the limit',
    async ({ rule, callers }) => {
      const { outcomes, grants, grantedInOrder, scheduler } = await play(algorithm, rule, callers);
      expect(grantedInOrder).toEqual(callers.map((_, i) => i));
      expectServedInTurn(algorithm, rule, callers, outcomes, grants);
      expect(worstExcess(algorithm.bound, rule, grants), boundName(algorithm.bound)).toBeLessThanOrEqual(0);
      expect(scheduler.pending).toBe(0);
    },
  );

  test.prop([callersArb('abort')])(
    'an abort spends nothing and does not delay or starve those behind it',
    async ({ rule, callers }) => {
      const { outcomes, grants, grantedInOrder } = await play(algorithm, rule, callers);
      outcomes.forEach((outcome, i) => {
        if (outcome.error !== undefined) expect(outcome.error).toBe(`reason ${i}`);
        else expect(outcome.decision?.allowed).toBe(true);
      });
      expect(grantedInOrder).toEqual([...grantedInOrder].sort((a, b) => a - b));
      // The next in line goes the moment an aborted caller leaves, and nobody pays for the aborted.
      expectServedInTurn(algorithm, rule, callers, outcomes, grants);
      // So nobody waits longer than if the aborted callers had stayed.
      const patient = await play(algorithm, rule, callers.map((c) => ({ ...c, abortAfter: null })));
      for (const [i, outcome] of outcomes.entries()) {
        if (outcome.error === undefined) expect(outcome.grantedAt).toBeLessThanOrEqual(patient.outcomes[i]?.grantedAt as number);
      }
    },
  );

  test.prop([callersArb('maxWait')])(
    'maxWaitMs: nobody is granted after its deadline, and nobody is refused who would have made it',
    async ({ rule, callers }) => {
      const { outcomes } = await play(algorithm, rule, callers);
      for (const [i, outcome] of outcomes.entries()) {
        const maxWaitMs = callers[i]?.maxWaitMs;
        if (maxWaitMs == null) {
          expect(outcome.decision?.allowed).toBe(true);
          continue;
        }
        const deadline = outcome.arrivedAt + maxWaitMs;
        if (outcome.decision?.allowed === true) {
          expect(outcome.grantedAt).toBeLessThanOrEqual(deadline);
          continue;
        }
        expect(outcome.decision?.retryAfterMs).toBeGreaterThanOrEqual(1);
        // Without its deadline this caller would have been granted too late: those ahead of it
        // fare the same either way, and its own grant depends only on them.
        const unbounded = await play(algorithm, rule, callers.map((c, j) => (j === i ? { ...c, maxWaitMs: null } : c)));
        expect(unbounded.outcomes[i]?.grantedAt).toBeGreaterThan(deadline);
      }
    },
  );
});

describe('acquire', () => {
  const bucket = (limit: number, windowMs: number) => () => new TokenBucket(new Rule(limit, windowMs));

  it('serves a key first come, first served: a small request does not overtake an earlier large one', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(4, 4000), clock: scheduler });
    const at: Record<string, number> = {};
    for (const [name, permits] of [['a', 4], ['b', 3], ['c', 1]] as const) {
      void limiter.acquire('k', permits).then(() => (at[name] = scheduler.now()));
    }
    await flush();
    expect(at).toEqual({ a: 0 });
    expect(scheduler.pending).toBe(1); // one timer for the key's line, set for b's exact wait
    for (let t = 0; t < 5000; t += 1000) {
      scheduler.advance(1000);
      await flush();
    }
    expect(at).toEqual({ a: 0, b: 3000, c: 4000 }); // c's one permit was there at 1000, but b came first
    expect(scheduler.pending).toBe(0);
  });

  it('keeps one timer per waiting key and none once nobody waits', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000), clock: scheduler });
    const all = ['a', 'b'].flatMap((key) => [1, 2, 3].map(() => limiter.acquire(key)));
    expect(scheduler.pending).toBe(2);
    scheduler.advance(5000);
    await Promise.all(all);
    expect(scheduler.pending).toBe(0);
    await limiter.acquire('c');
    expect(scheduler.pending).toBe(0);
  });

  it('resolves at once with the exact refusal when the wait would exceed maxWaitMs, and waits when it would not', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(2, 1000), clock: scheduler });
    limiter.tryAcquire('k', 2);
    const expected = limiter.tryAcquire('k');
    expect(await limiter.acquire('k', 1, { maxWaitMs: 499 })).toEqual(expected);
    expect(scheduler.pending).toBe(0);
    const granted = limiter.acquire('k', 1, { maxWaitMs: 500 });
    scheduler.advance(500);
    expect(await granted).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.acquire('k', 1, { maxWaitMs: 0 })).toMatchObject({ allowed: false, retryAfterMs: 500 });
  });

  it('turns away a caller behind others at once when the head alone already goes past its deadline', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(4, 4000), clock: scheduler });
    limiter.tryAcquire('k', 4);
    const head = limiter.acquire('k', 3);
    // The head goes at 3000; this caller could not go before, so it hears at once how long that is.
    expect(await limiter.acquire('k', 1, { maxWaitMs: 2999 })).toEqual({ allowed: false, limit: 4, remaining: 0, retryAfterMs: 3000, resetAfterMs: 4000 });
    const next = limiter.acquire('k', 1, { maxWaitMs: 4000 });
    scheduler.advance(4000);
    expect(await head).toMatchObject({ allowed: true });
    expect(await next).toMatchObject({ allowed: true });
  });

  it('tells a caller turned away behind others how the key stands now, not what the head heard', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(4, 4000), clock: scheduler });
    limiter.tryAcquire('k', 4);
    const head = limiter.acquire('k', 4); // goes at 4000
    scheduler.advance(3000);
    expect(await limiter.acquire('k', 1, { maxWaitMs: 0 })).toEqual({ allowed: false, limit: 4, remaining: 3, retryAfterMs: 1000, resetAfterMs: 1000 });
    scheduler.advance(1000);
    expect(await head).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('answers at once a caller whose own permits cannot fit by its deadline, however the line ahead moves', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(4, 4000), clock: scheduler });
    limiter.tryAcquire('k', 4);
    const head = limiter.acquire('k', 1); // goes at 1000
    let settled = false;
    const late = limiter.acquire('k', 3, { maxWaitMs: 2000 }).then((decision) => {
      settled = true;
      return decision;
    });
    await Promise.resolve();
    expect(settled).toBe(true); // 3 permits need 3000 ms even alone: it never waits for nothing
    expect(await late).toEqual({ allowed: false, limit: 4, remaining: 0, retryAfterMs: 3000, resetAfterMs: 4000 });
    scheduler.advance(1000);
    expect(await head).toMatchObject({ allowed: true });
  });

  it('rejects a request larger than the limit on a key that waits without being resident, as on a resident key', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000), clock: scheduler, maxKeys: 1 });
    limiter.tryAcquire('a');
    const b = limiter.acquire('b'); // the table is full: 'b' waits without a slot
    expect(limiter.size).toBe(1);
    await expect(limiter.acquire('b', 2)).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 1, got 2'));
    scheduler.advance(1000);
    expect(await b).toMatchObject({ allowed: true });
  });

  it('on abort rejects with signal.reason, spends nothing, and lets the next in line go at once', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(4, 4000), clock: scheduler });
    limiter.tryAcquire('k', 4);
    const controller = new AbortController();
    const big = limiter.acquire('k', 4, { signal: controller.signal });
    let smallAt: number | undefined;
    const small = limiter.acquire('k', 1).then((d) => ((smallAt = scheduler.now()), d));
    scheduler.advance(1500);
    controller.abort(new Error('user left'));
    await expect(big).rejects.toThrow('user left');
    expect(await small).toMatchObject({ allowed: true, remaining: 0 });
    expect(smallAt).toBe(1500);
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 500 }); // only the small one spent
    expect(scheduler.pending).toBe(0);
    await expect(limiter.acquire('k', 1, { signal: AbortSignal.abort('too late') })).rejects.toBe('too late');
    expect(scheduler.pending).toBe(0);
  });

  it('waits for a slot when the key table is full, and keeps a key someone waits on', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000), clock: scheduler, maxKeys: 1 });
    limiter.tryAcquire('a');
    const b = limiter.acquire('b');
    expect(limiter.tryAcquire('c')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    scheduler.advance(1000);
    expect(await b).toMatchObject({ allowed: true });
    const a = limiter.acquire('b');
    expect(limiter.evictIdle(scheduler.now() + 1000)).toBe(0); // idle by then, but someone waits on it
    scheduler.advance(1000);
    expect(await a).toMatchObject({ allowed: true });
  });

  it('rejects bad arguments with errors naming them, queueing nothing', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(3, 1000), clock: scheduler });
    limiter.tryAcquire('k', 3);
    const waiting = limiter.acquire('k');
    await expect(limiter.acquire(7 as never)).rejects.toThrow(typeError('ratekeeper: `key` must be a string, got 7'));
    await expect(limiter.acquire('fresh', 0)).rejects.toThrow(rangeError('ratekeeper: `permits` must be a safe integer of at least 1, got 0'));
    await expect(limiter.acquire('k', 0)).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 3, got 0'));
    await expect(limiter.acquire('k', 4)).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 3, got 4'));
    await expect(limiter.acquire('k', 1, { maxWaitMs: -1 })).rejects.toThrow(
      rangeError('ratekeeper: `maxWaitMs` must be a number of at least 0 (Infinity for no limit), got -1'),
    );
    await expect(limiter.acquire('k', 1, { maxWaitMs: '5' as never })).rejects.toThrow(typeError('ratekeeper: `maxWaitMs` must be a number, got "5"'));
    await expect(limiter.acquire('k', 1, { signal: 'stop' as never })).rejects.toThrow(typeError('ratekeeper: `signal` must be an AbortSignal, got "stop"'));
    await expect(limiter.acquire('k', 1, null as never)).rejects.toThrow(typeError('ratekeeper: acquire options must be an object, got null'));
    expect(scheduler.pending).toBe(1);
    scheduler.advance(334);
    expect(await waiting).toMatchObject({ allowed: true, remaining: 0 });
    expect(scheduler.pending).toBe(0);
  });

  it('waits on real timers without polling', async () => {
    let attempts = 0;
    const limiter = new KeyedRateLimiter({
      algorithm: () => {
        const inner = new TokenBucket(new Rule(1, 40));
        return { tryAcquire: (now, permits) => (attempts++, inner.tryAcquire(now, permits)), isIdle: (now) => inner.isIdle(now) };
      },
    });
    const started = performance.now();
    for (let i = 0; i < 3; i++) await limiter.acquire('k');
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(70); // waited for the permits on real time: load can only add to it
    expect(elapsed).toBeLessThan(HANG_MS);
    expect(attempts).toBeLessThanOrEqual(7); // one try each, plus a retry if a timer fires a ms early
  });
});
