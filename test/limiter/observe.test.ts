import { fc, test } from '@fast-check/vitest';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { withRateLimit } from '../../src/http';
import {
  type AsyncRateLimiter,
  type ChangeEvent,
  type Decision,
  type DecisionEvent,
  KeyedRateLimiter,
  ManualClock,
  ManualScheduler,
  type ObservedDecision,
  type ObserveOptions,
  Rule,
  TokenBucket,
  observe,
} from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import type { AsyncReservation, Reservation } from '../../src/limiter/reservation';
import { type AlgorithmCase, algorithms, composites } from '../support/algorithms';
import { ioredisClient, redisPort, uniquePrefix } from '../redis/helpers/clients';
import { rangeError, typeError } from '../../src/core/errors';

// observe() and its shadow mode, checked against a twin: the same limiter, unwrapped, fed the same
// traffic on its own manual clock. Time moves only when the test moves it.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Step {
  readonly dt: number;
  readonly key: string;
  readonly permits: number;
}

/** Random traffic on three keys through any algorithm or composite, sometimes with a key table too small for it. */
const trafficArb = fc
  .record({
    kind: fc.constantFrom<AlgorithmCase>(...algorithms, ...composites),
    limit: fc.integer({ min: 1, max: 5 }),
    windowMs: fc.oneof(fc.constantFrom(1000, 7), fc.integer({ min: 1, max: 3000 })),
    maxKeys: fc.option(fc.integer({ min: 1, max: 2 }), { nil: undefined }),
  })
  .chain(({ kind, limit, windowMs, maxKeys }) =>
    fc.record({
      kind: fc.constant(kind),
      rule: fc.constant(new Rule(limit, windowMs)),
      maxKeys: fc.constant(maxKeys),
      steps: fc.array(
        fc.record({
          dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2 * windowMs })),
          key: fc.constantFrom('a', 'b', 'c'),
          permits: fc.integer({ min: 1, max: limit }),
        }),
        { maxLength: 40, size: 'max' }, // fast-check would keep arrays to ~10 elements otherwise
      ),
    }),
  );

function limiterFor(kind: AlgorithmCase, rule: Rule, maxKeys?: number) {
  const clock = new ManualClock(1_000_000);
  const limiter = new KeyedRateLimiter({ algorithm: () => kind.make(rule), clock, ...(maxKeys === undefined ? {} : { maxKeys }) });
  return { clock, limiter };
}

/** A store-backed limiter in miniature: a KeyedRateLimiter that answers a tick later, as Redis would. */
function asyncOver(inner: KeyedRateLimiter): AsyncRateLimiter {
  return { tryAcquire: async (key, permits) => (await flush(), inner.tryAcquire(key, permits)) };
}

function recorder(options: Partial<ObserveOptions> = {}) {
  const events: DecisionEvent[] = [];
  return { events, options: { onDecision: (event: DecisionEvent) => void events.push(event), ...options } };
}

/** The event the observed limiter should report for a call that the inner limiter answered with `decision`. */
const eventFor = (name: string, { key, permits }: Step, decision: Decision, shadowed = false): DecisionEvent => ({
  name,
  key,
  permits,
  decision,
  allowed: decision.allowed,
  degraded: decision.degraded,
  shadowed,
});

describe('observe', () => {
  test.prop([trafficArb])('an observed limiter decides exactly as the inner one and reports every decision once, in order', ({ kind, rule, maxKeys, steps }) => {
    const observedSide = limiterFor(kind, rule, maxKeys);
    const twin = limiterFor(kind, rule, maxKeys);
    const { events, options } = recorder({ name: kind.name });
    const observed = observe(observedSide.limiter, options);
    const expected: DecisionEvent[] = [];
    for (const step of steps) {
      observedSide.clock.advance(step.dt);
      twin.clock.advance(step.dt);
      const decision = twin.limiter.tryAcquire(step.key, step.permits);
      expect(observed.tryAcquire(step.key, step.permits)).toStrictEqual(decision);
      expected.push(eventFor(kind.name, step, decision));
    }
    expect(events).toStrictEqual(expected);
  });

  test.prop([trafficArb])('over an async limiter it decides as the inner one does, reporting each decision once, in order', async ({ kind, rule, maxKeys, steps }) => {
    const observedSide = limiterFor(kind, rule, maxKeys);
    const twin = limiterFor(kind, rule, maxKeys);
    const { events, options } = recorder();
    const observed = observe(asyncOver(observedSide.limiter), options);
    const expected: DecisionEvent[] = [];
    for (const step of steps) {
      observedSide.clock.advance(step.dt);
      twin.clock.advance(step.dt);
      const decision = twin.limiter.tryAcquire(step.key, step.permits);
      expect(await observed.tryAcquire(step.key, step.permits)).toStrictEqual(decision);
      expected.push(eventFor('default', step, decision));
    }
    expect(events).toStrictEqual(expected);
  });

  it('stays synchronous over a synchronous limiter and async over an async one, in its types too', async () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: new ManualClock() });
    const sync = observe(inner, { onDecision: () => {} });
    expect(sync.tryAcquire('k')).toStrictEqual({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 });
    expectTypeOf(sync.tryAcquire('k')).toEqualTypeOf<ObservedDecision>();
    expectTypeOf(sync.acquire).returns.toEqualTypeOf<Promise<ObservedDecision>>();

    const async = observe(asyncOver(inner), { onDecision: () => {} });
    const pending = async.tryAcquire('other');
    expect(pending).toBeInstanceOf(Promise);
    expect(await pending).toMatchObject({ allowed: true });
    expectTypeOf(async.tryAcquire('k')).toEqualTypeOf<Promise<ObservedDecision>>();
    expect('acquire' in async).toBe(false); // the inner one has none, so neither has the wrapper
    expectTypeOf(async).not.toHaveProperty('acquire');
  });

  it('forwards acquire, so waiting still works, and reports each final decision once', async () => {
    const scheduler = new ManualScheduler();
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(2, 2000)), clock: scheduler });
    const { events, options } = recorder({ name: 'uploads' });
    const observed = observe(inner, options);
    const granted: number[] = [];
    const waits = [1, 1, 1, 1].map((permits) => observed.acquire('k', permits).then((decision) => (granted.push(scheduler.now()), decision)));
    const impatient = observed.acquire('k', 1, { maxWaitMs: 500 });
    const controller = new AbortController();
    const aborted = observed.acquire('k', 1, { signal: controller.signal });
    controller.abort(new Error('gave up'));
    await expect(aborted).rejects.toThrow('gave up');
    expect(await impatient).toMatchObject({ allowed: false });
    await scheduler.advanceAsync(2000);
    await Promise.all(waits);
    expect(granted).toEqual([0, 0, 1000, 2000]);
    // The waits were tried more often than that; only each caller's final answer is an event, and the aborted one has none.
    expect(events.map(({ allowed, permits, key, name }) => ({ allowed, permits, key, name }))).toEqual([
      { allowed: true, permits: 1, key: 'k', name: 'uploads' },
      { allowed: true, permits: 1, key: 'k', name: 'uploads' },
      { allowed: false, permits: 1, key: 'k', name: 'uploads' },
      { allowed: true, permits: 1, key: 'k', name: 'uploads' },
      { allowed: true, permits: 1, key: 'k', name: 'uploads' },
    ]);
    expect(events[2]?.decision).toStrictEqual(await impatient);
  });

  it('reports the degraded reason: a full key table', () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(5)), clock: new ManualClock(), maxKeys: 1 });
    const { events, options } = recorder();
    const observed = observe(inner, options);
    observed.tryAcquire('a');
    expect(observed.tryAcquire('b')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    expect(events.map((e) => [e.key, e.allowed, e.degraded])).toEqual([
      ['a', true, undefined],
      ['b', false, 'key-table-full'],
    ]);
  });

  it('reports the degraded reason of a RedisRateLimiter whose store fails, and its outage answer', async () => {
    const down = () => Promise.reject(new Error('connection refused'));
    const redis = new RedisRateLimiter({ client: { evalsha: down, eval: down }, algorithm: 'token-bucket', rule: Rule.perSecond(4), onStoreError: 'deny', clock: new ManualClock() });
    const { events, options } = recorder({ name: 'redis' });
    const decision = await observe(redis, options).tryAcquire('k');
    expect(decision).toMatchObject({ allowed: false, degraded: 'store-error' });
    expect(events).toStrictEqual([{ name: 'redis', key: 'k', permits: 1, decision, allowed: false, degraded: 'store-error', shadowed: false }]);
  });

  it('reports nothing for a call that throws: a bad argument reached no decision', async () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) });
    const { events, options } = recorder();
    expect(() => observe(inner, options).tryAcquire('k', 3)).toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 2, got 3'));
    await expect(observe(asyncOver(inner), options).tryAcquire('k', 0)).rejects.toThrow(RangeError);
    expect(events).toEqual([]);
  });

  it('a hook that throws breaks no decision: onError hears it, and what onError throws is dropped', async () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: new ManualClock() });
    const failure = new Error('metrics backend down');
    const heard: [unknown, DecisionEvent | ChangeEvent][] = [];
    const onDecision = () => {
      throw failure;
    };
    const observed = observe(inner, { onDecision, onError: (error, event) => void heard.push([error, event]) });
    expect(observed.tryAcquire('k')).toMatchObject({ allowed: true });
    expect(heard).toEqual([[failure, expect.objectContaining({ key: 'k', allowed: true })]]);

    const silent = observe(inner, { onDecision });
    expect(silent.tryAcquire('k')).toMatchObject({ allowed: false });
    const loud = observe(asyncOver(inner), {
      onDecision,
      onError: () => {
        throw new Error('and the logger too');
      },
    });
    expect(await loud.tryAcquire('k')).toMatchObject({ allowed: false });
  });

  it.each<[string, unknown, unknown, Error]>([
    ['a limiter without tryAcquire', {}, { onDecision: () => {} }, typeError('ratekeeper: `limiter` must be an object with a tryAcquire(key, permits) method, got an object')],
    ['no limiter', undefined, { onDecision: () => {} }, typeError('ratekeeper: `limiter` must be an object with a tryAcquire(key, permits) method, got undefined')],
    ['no options', 'limiter', undefined, typeError('ratekeeper: observe options must be an object, got undefined')],
    ['no onDecision', 'limiter', {}, typeError('ratekeeper: `onDecision` must be a function, got undefined')],
    ['an onDecision that is a number', 'limiter', { onDecision: 3 }, typeError('ratekeeper: `onDecision` must be a function, got 3')],
    ['a name that is not a string', 'limiter', { onDecision: () => {}, name: 7 }, typeError('ratekeeper: `name` must be a string, got 7')],
    ['a shadow that is not a boolean', 'limiter', { onDecision: () => {}, shadow: 'yes' }, typeError('ratekeeper: `shadow` must be a boolean, got "yes"')],
    ['an onError that is not a function', 'limiter', { onDecision: () => {}, onError: 'log' }, typeError('ratekeeper: `onError` must be a function, got "log"')],
  ])('refuses %s, naming it', (_, limiter, options, error) => {
    const real = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)) });
    expect(() => observe((limiter === 'limiter' ? real : limiter) as KeyedRateLimiter, options as ObserveOptions)).toThrow(error);
  });
});

/** The key operations, over an async limiter in miniature: each answers a tick later, as a store would. */
function asyncManaged(inner: KeyedRateLimiter) {
  const later = async <T>(run: () => T): Promise<T> => (await flush(), run());
  return {
    tryAcquire: (key: string, permits?: number) => later(() => inner.tryAcquire(key, permits)),
    peek: (key: string, permits?: number) => later(() => inner.peek(key, permits)),
    charge: (key: string, permits: number) => later(() => inner.charge(key, permits)),
    block: (key: string, durationMs: number) => later(() => inner.block(key, durationMs)),
    reset: (key: string) => later(() => inner.reset(key)),
    reserve: (key: string, permits?: number): Promise<AsyncReservation> =>
      later(() => {
        const reservation = inner.reserve(key, permits);
        return { decision: reservation.decision, settle: (actual: number) => later(() => reservation.settle(actual)), cancel: () => later(() => reservation.cancel()) };
      }),
    close: () => inner.close(),
  };
}

type KeyOp =
  | { readonly op: 'tryAcquire' | 'peek' | 'reserve' | 'charge'; readonly dt: number; readonly key: string; readonly permits: number }
  | { readonly op: 'settle'; readonly dt: number; readonly which: number; readonly permits: number }
  | { readonly op: 'block'; readonly dt: number; readonly key: string; readonly durationMs: number }
  | { readonly op: 'reset'; readonly dt: number; readonly key: string };

const keyOpsArb = (limit: number) =>
  fc.array(
    fc.oneof(
      fc.record({ op: fc.constantFrom('tryAcquire' as const, 'peek' as const, 'reserve' as const), dt: fc.integer({ min: 0, max: 500 }), key: fc.constantFrom('a', 'b'), permits: fc.integer({ min: 1, max: limit }) }),
      fc.record({ op: fc.constant('charge' as const), dt: fc.integer({ min: 0, max: 500 }), key: fc.constantFrom('a', 'b'), permits: fc.integer({ min: 1, max: 3 * limit }) }),
      fc.record({ op: fc.constant('settle' as const), dt: fc.integer({ min: 0, max: 500 }), which: fc.nat(), permits: fc.integer({ min: 0, max: 2 * limit }) }),
      fc.record({ op: fc.constant('block' as const), dt: fc.integer({ min: 0, max: 500 }), key: fc.constantFrom('a', 'b'), durationMs: fc.integer({ min: 1, max: 2000 }) }),
      fc.record({ op: fc.constant('reset' as const), dt: fc.integer({ min: 0, max: 500 }), key: fc.constantFrom('a', 'b') }),
    ),
    { maxLength: 30, size: 'max' },
  );

const keyTrafficArb = fc
  .record({ kind: fc.constantFrom<AlgorithmCase>(...algorithms, ...composites), limit: fc.integer({ min: 1, max: 5 }), windowMs: fc.integer({ min: 1, max: 3000 }) })
  .chain(({ kind, limit, windowMs }) => fc.record({ kind: fc.constant(kind), rule: fc.constant(new Rule(limit, windowMs)), ops: keyOpsArb(limit), shadow: fc.boolean() }));

type Event = ['decision', DecisionEvent] | ['change', ChangeEvent];

/**
 * Plays key operations on an observed limiter and on an unwrapped twin, expecting the same answers
 * (shadowed where shadow mode says) and the events each operation should report, in order.
 */
async function playKeyOps({ kind, rule, ops, shadow }: { kind: AlgorithmCase; rule: Rule; ops: readonly KeyOp[]; shadow: boolean }, async: boolean) {
  const side = limiterFor(kind, rule);
  const twin = limiterFor(kind, rule);
  const events: Event[] = [];
  const options: ObserveOptions = { name: 'ops', shadow, onDecision: (e) => void events.push(['decision', e]), onChange: (e) => void events.push(['change', e]) };
  const observed = async ? observe(asyncManaged(side.limiter), options) : observe(side.limiter, options);
  const expected: Event[] = [];
  const seen = (decision: Decision) => (shadow && !decision.allowed ? { ...decision, allowed: true, retryAfterMs: 0, shadowed: true } : decision);
  const decided = (key: string, permits: number, decision: Decision) =>
    expected.push(['decision', { name: 'ops', key, permits, decision, allowed: decision.allowed, degraded: decision.degraded, shadowed: shadow && !decision.allowed }]);
  const changed = (key: string, operation: ChangeEvent['operation'], permits?: number, durationMs?: number, decision?: Decision) =>
    expected.push(['change', { name: 'ops', key, operation, permits, durationMs, decision }]);
  const held: { key: string; mine: Reservation | AsyncReservation; theirs: Reservation }[] = [];
  for (const step of ops) {
    side.clock.advance(step.dt);
    twin.clock.advance(step.dt);
    if (step.op === 'tryAcquire') {
      const decision = twin.limiter.tryAcquire(step.key, step.permits);
      expect(await observed.tryAcquire(step.key, step.permits)).toStrictEqual(seen(decision));
      decided(step.key, step.permits, decision);
    } else if (step.op === 'peek') {
      expect(await observed.peek(step.key, step.permits)).toStrictEqual(seen(twin.limiter.peek(step.key, step.permits)));
    } else if (step.op === 'charge') {
      const decision = twin.limiter.charge(step.key, step.permits);
      expect(await observed.charge(step.key, step.permits)).toStrictEqual(decision);
      changed(step.key, 'charge', step.permits, undefined, decision);
    } else if (step.op === 'reserve') {
      const theirs = twin.limiter.reserve(step.key, step.permits);
      const mine = await observed.reserve(step.key, step.permits);
      expect(mine.decision).toStrictEqual(seen(theirs.decision));
      decided(step.key, step.permits, theirs.decision);
      held.push({ key: step.key, mine, theirs });
    } else if (step.op === 'settle') {
      const [reservation] = held.splice(step.which % Math.max(1, held.length), 1);
      if (reservation === undefined) continue;
      const { key, mine, theirs } = reservation;
      if (step.permits === 0) {
        theirs.cancel();
        expect(await mine.cancel()).toBeUndefined();
        if (theirs.decision.allowed) changed(key, 'cancel', 0);
      } else {
        const decision = theirs.settle(step.permits);
        expect(await mine.settle(step.permits)).toStrictEqual(seen(decision));
        if (theirs.decision.allowed) changed(key, 'settle', step.permits, undefined, decision);
      }
    } else if (step.op === 'block') {
      twin.limiter.block(step.key, step.durationMs);
      expect(await observed.block(step.key, step.durationMs)).toBeUndefined();
      changed(step.key, 'block', undefined, step.durationMs);
    } else {
      twin.limiter.reset(step.key);
      expect(await observed.reset(step.key)).toBeUndefined();
      changed(step.key, 'reset');
    }
    expect(events).toStrictEqual(expected);
  }
  for (const key of ['a', 'b']) expect(side.limiter.peek(key, 0)).toStrictEqual(twin.limiter.peek(key, 0));
}

describe('observe forwards the key operations', () => {
  test.prop([keyTrafficArb])(
    'peek, reserve (settle, cancel), charge, block and reset do as the inner limiter does; a reservation is a decision, charge/settle/cancel/block/reset are changes, peek reports nothing',
    (traffic) => playKeyOps(traffic, false),
  );

  test.prop([keyTrafficArb])('the same over an async limiter whose key operations return promises', (traffic) => playKeyOps(traffic, true));

  it('offers exactly the operations the inner limiter has, typed as its own (sync or async)', async () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: new ManualClock() });
    const sync = observe(inner, { onDecision: () => {} });
    expectTypeOf(sync.peek).returns.toEqualTypeOf<ObservedDecision>();
    expectTypeOf(sync.charge).returns.toEqualTypeOf<Decision>();
    expectTypeOf(sync.reserve).returns.toHaveProperty('decision').toEqualTypeOf<ObservedDecision>();
    expectTypeOf(sync.reserve).returns.toHaveProperty('settle').returns.toEqualTypeOf<Decision>();
    expectTypeOf(sync.block).toEqualTypeOf<KeyedRateLimiter['block']>();
    expectTypeOf(sync.reset).toEqualTypeOf<KeyedRateLimiter['reset']>();
    expectTypeOf(sync.close).toEqualTypeOf<KeyedRateLimiter['close']>();

    const async = observe(asyncManaged(inner), { onDecision: () => {} });
    expectTypeOf(async.peek).returns.toEqualTypeOf<Promise<ObservedDecision>>();
    expectTypeOf(async.charge).returns.toEqualTypeOf<Promise<Decision>>();
    expectTypeOf(async.reserve).returns.resolves.toHaveProperty('decision').toEqualTypeOf<ObservedDecision>();
    expectTypeOf(async.block).returns.toEqualTypeOf<Promise<void>>();
    expect(await async.peek('k', 0)).toMatchObject({ allowed: true, remaining: 2 });

    const bare = observe(asyncOver(inner), { onDecision: () => {} });
    for (const method of ['peek', 'reserve', 'charge', 'block', 'reset', 'close']) expect(method in bare).toBe(false);
    expectTypeOf(bare).not.toHaveProperty('peek');
    expectTypeOf(bare).not.toHaveProperty('reserve');
    expectTypeOf(bare).not.toHaveProperty('close');
  });

  it('forwards close() and using: a waiter on the inner limiter is let go', async () => {
    const scheduler = new ManualScheduler();
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(1, 1000)), clock: scheduler });
    const waiting = (() => {
      using observed = observe(inner, { onDecision: () => {} });
      observed.tryAcquire('k');
      return observed.acquire('k');
    })();
    await expect(waiting).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_CLOSED' });
    const again = observe(inner, { onDecision: () => {} });
    await expect(again.acquire('k')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_CLOSED' });
    again.close();
  });

  it('a hook for changes that throws breaks nothing: onError hears it with the event', () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: new ManualClock() });
    const heard: unknown[] = [];
    const failure = new Error('audit log down');
    const observed = observe(inner, {
      onDecision: () => {},
      onChange: () => {
        throw failure;
      },
      onError: (error, event) => void heard.push(error, event),
    });
    expect(observed.charge('k', 3)).toMatchObject({ allowed: true, remaining: 0 });
    expect(heard).toEqual([failure, expect.objectContaining({ operation: 'charge', key: 'k', permits: 3 })]);
    expect(() => observe(inner, { onDecision: () => {}, onChange: 'log' as never })).toThrow(typeError('ratekeeper: `onChange` must be a function, got "log"'));
  });
});

describe('observe in shadow mode', () => {
  test.prop([trafficArb.filter(({ maxKeys }) => maxKeys === undefined)])(
    'never refuses, reports exactly the inner refusals, and later requests see the inner state unchanged by them',
    ({ kind, rule, steps }) => {
      const shadowed = limiterFor(kind, rule);
      // The twin is sent only what the inner limiter granted: had a shadow-allowed request spent
      // anything, the two would disagree on some later request.
      const twin = limiterFor(kind, rule);
      const { events, options } = recorder({ name: 'trial', shadow: true });
      const observed = observe(shadowed.limiter, options);
      for (const step of steps) {
        shadowed.clock.advance(step.dt);
        twin.clock.advance(step.dt);
        const decision = observed.tryAcquire(step.key, step.permits);
        const event = events.at(-1) as DecisionEvent;
        expect(events).toHaveLength(steps.indexOf(step) + 1);
        expect(decision.allowed).toBe(true);
        if (event.shadowed) {
          const refusal = event.decision;
          expect(event).toStrictEqual(eventFor('trial', step, refusal, true));
          expect(refusal.allowed).toBe(false);
          expect(decision).toStrictEqual({ ...refusal, allowed: true, retryAfterMs: 0, shadowed: true });
        } else {
          expect(event).toStrictEqual(eventFor('trial', step, decision));
          expect(twin.limiter.tryAcquire(step.key, step.permits)).toStrictEqual(decision);
        }
      }
      for (const key of ['a', 'b', 'c']) expect(shadowed.limiter.tryAcquire(key, rule.limit)).toStrictEqual(twin.limiter.tryAcquire(key, rule.limit));
    },
  );

  it('marks a shadow-allowed decision as an Allowed with the refusal’s numbers and shadowed: true', () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(2, 1000)), clock: new ManualClock() });
    const { events, options } = recorder({ shadow: true });
    const observed = observe(inner, options);
    expect([1, 2, 3].map(() => observed.tryAcquire('k'))).toStrictEqual([
      { allowed: true, limit: 2, remaining: 1, retryAfterMs: 0, resetAfterMs: 500 },
      { allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 },
      { allowed: true, limit: 2, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000, shadowed: true },
    ]);
    expect(events[2]).toMatchObject({ allowed: false, shadowed: true, decision: { allowed: false, remaining: 0, retryAfterMs: 500 } });
  });

  it('does not wait: acquire answers at once, and a wait the inner limiter would impose is a shadowed refusal', async () => {
    const scheduler = new ManualScheduler();
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(1, 1000)), clock: scheduler });
    const { events, options } = recorder({ shadow: true });
    const observed = observe(inner, options);
    expect(await observed.acquire('k')).toStrictEqual({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 });
    expect(await observed.acquire('k', 1, { maxWaitMs: 5000 })).toMatchObject({ allowed: true, shadowed: true });
    expect(events.map((e) => [e.allowed, e.shadowed, e.decision.retryAfterMs])).toEqual([
      [true, false, 0],
      [false, true, 1000],
    ]);
    await expect(observed.acquire('k', 1, { signal: AbortSignal.abort(new Error('gone')) })).rejects.toThrow('gone');
    expect(events).toHaveLength(2);
  });

  it('checks acquire options in shadow mode as the inner limiter would, before replacing maxWaitMs', async () => {
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(1, 1000)), clock: new ManualScheduler() });
    const { events, options } = recorder({ shadow: true });
    const observed = observe(inner, options);
    await expect(observed.acquire('k', 1, null as never)).rejects.toThrow(typeError('ratekeeper: acquire options must be an object, got null'));
    await expect(observed.acquire('k', 1, 'x' as never)).rejects.toThrow(typeError('ratekeeper: acquire options must be an object, got "x"'));
    await expect(observed.acquire('k', 1, { maxWaitMs: -5 })).rejects.toThrow(
      rangeError('ratekeeper: `maxWaitMs` must be a number of at least 0 (Infinity for no limit), got -5'),
    );
    expect(events).toHaveLength(0);
    expect(inner.size).toBe(0);
  });

  it('lets a degraded refusal through as well, reporting its reason', async () => {
    const down = () => Promise.reject(new Error('connection refused'));
    const redis = new RedisRateLimiter({ client: { evalsha: down, eval: down }, algorithm: 'fixed-window', rule: Rule.perSecond(4), onStoreError: 'deny', clock: new ManualClock() });
    const { events, options } = recorder({ shadow: true });
    expect(await observe(redis, options).tryAcquire('k')).toMatchObject({ allowed: true, shadowed: true, degraded: 'store-error' });
    expect(events[0]).toMatchObject({ allowed: false, shadowed: true, degraded: 'store-error' });
  });
});

describe('observe with the HTTP middleware', () => {
  const request = () => new Request('http://api.test/');
  const handle = (limiter: Parameters<typeof withRateLimit>[0]['limiter']) =>
    withRateLimit({ limiter, key: () => 'client-1' }, () => new Response('ok'));

  it('an observed limiter refuses as before, and every request is an event', async () => {
    const { events, options } = recorder({ name: 'api' });
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(2)), clock: new ManualClock() });
    const handler = handle(observe(inner, options));
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await handler(request())).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect(events.map((e) => [e.name, e.key, e.allowed])).toEqual([
      ['api', 'client-1', true],
      ['api', 'client-1', true],
      ['api', 'client-1', false],
    ]);
  });

  it('settles through an observed limiter: failed requests given back with skipFailedRequests, each request one decision, each refund one change', async () => {
    const { events, options } = recorder({ name: 'login' });
    const changes: ChangeEvent[] = [];
    const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(2)), clock: new ManualClock() });
    let status = 401;
    const handler = withRateLimit({ limiter: observe(inner, { ...options, onChange: (e) => void changes.push(e) }), key: () => 'client-1', skipFailedRequests: true }, () => new Response('no', { status }));
    for (let i = 0; i < 3; i++) expect((await handler(request())).status).toBe(401);
    await flush();
    expect(events.map((e) => e.allowed)).toEqual([true, true, true]); // every failure was given back
    expect(changes.map((e) => [e.operation, e.key])).toEqual([['cancel', 'client-1'], ['cancel', 'client-1'], ['cancel', 'client-1']]);
    status = 200;
    for (let i = 0; i < 3; i++) await handler(request());
    expect(events.map((e) => e.allowed)).toEqual([true, true, true, true, true, false]);
  });

  it('in shadow mode every request is served, and the would-be refusals are reported', async () => {
    const { events, options } = recorder({ name: 'api-v2', shadow: true });
    const inner = asyncOver(new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(2)), clock: new ManualClock() }));
    const handler = handle(observe(inner, options));
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await handler(request())).status);
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect(events.map((e) => e.shadowed)).toEqual([false, false, true, true]);
  });
});

describe.skipIf(!redisPort)('observe over a real Redis', () => {
  it('decides as the RedisRateLimiter does and reports each decision, waits included', async () => {
    const client = ioredisClient();
    try {
      const clock = new ManualScheduler(5_000_000);
      const redis = new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule: new Rule(2, 1000), onStoreError: 'deny', clock, prefix: uniquePrefix('observe') });
      const { events, options } = recorder({ name: 'redis' });
      const observed = observe(redis, options);
      const decisions = [await observed.tryAcquire('k'), await observed.tryAcquire('k'), await observed.tryAcquire('k')];
      expect(decisions.map((d) => d.allowed)).toEqual([true, true, false]);
      expect(await observed.acquire('k', 1, { maxWaitMs: 10 })).toMatchObject({ allowed: false, retryAfterMs: 1000 });
      expect(events.map((e) => e.decision)).toStrictEqual([...decisions, expect.objectContaining({ allowed: false })]);
    } finally {
      client.disconnect();
    }
  });
});
