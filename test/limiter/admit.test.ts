// src/limiter/admit.ts: API.md "Admission across keys" as timelines, its bad input, and the parts
// that come back as Promises (a store's reserve, cancel or peek), with their failures.
import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  admit,
  FixedWindow,
  KeyedRateLimiter,
  ManualClock,
  Rule,
  SlidingWindowLog,
  TokenBucket,
  type AdmittingRateLimiter,
  type AsyncReservation,
  type Decision,
  type MemoryAdmission,
  type StoreAdmission,
} from '../../src/index';
import type { RedisRateLimiter } from '../../src/redis';

const clock = () => new ManualClock(0);
const coded = (name: 'TypeError' | 'RangeError', message: string) =>
  expect.objectContaining({ name, message, code: name === 'TypeError' ? 'ERR_RATEKEEPER_INVALID_ARGUMENT' : 'ERR_RATEKEEPER_OUT_OF_RANGE' });
const bucket = (limit: number, at = clock()) => new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(limit, 60_000)), clock: at });

/** A limiter of the user's own whose answers come as Promises, as a store's do: `inner` decides, `cancel` may fail. */
function asStore(inner: KeyedRateLimiter, failCancel?: unknown): AdmittingRateLimiter & { cancelled: number; reserve(key: string, permits?: number): Promise<AsyncReservation> } {
  const store = {
    cancelled: 0,
    async reserve(key: string, permits?: number): Promise<AsyncReservation> {
      const reservation = inner.reserve(key, permits);
      return {
        decision: reservation.decision,
        settle: async (actual) => reservation.settle(actual),
        cancel: async () => {
          store.cancelled++;
          if (failCancel !== undefined) throw failCancel;
          reservation.cancel();
        },
      };
    },
    peek: async (key: string, permits?: number) => inner.peek(key, permits),
  };
  return store;
}

describe('admit in memory', () => {
  it('a refusal in any part spends nothing in the others; a grant reports each part and binds on the fewest left', () => {
    const at = clock();
    const perUser = bucket(5, at);
    const perOrg = bucket(3, at);
    const tokens = bucket(100, at);
    const parts = (estimate: number) => [
      { limiter: perUser, key: 'u1' },
      { limiter: perOrg, key: 'org' },
      { limiter: tokens, key: 'org', permits: estimate },
    ];
    const granted = admit(parts(60));
    expect(granted.parts.map((d) => [d.allowed, d.remaining])).toEqual([[true, 4], [true, 2], [true, 40]]);
    expect(granted.decision).toBe(granted.parts[1]);
    const refused = admit(parts(50));
    expect(refused.decision).toEqual({ allowed: false, limit: 100, remaining: 40, retryAfterMs: 6000, resetAfterMs: 36_000 });
    expect(refused.parts.map((d) => d.allowed)).toEqual([true, true, false]);
    expect([perUser.peek('u1', 0).remaining, perOrg.peek('org', 0).remaining, tokens.peek('org', 0).remaining]).toEqual([4, 2, 40]);
    // The real cost, settled per part: 25 of the 60 tokens come back.
    expect(granted.settle([1, 1, 35]).map((d) => d.remaining)).toEqual([4, 2, 65]);
  });

  it('the refusal is the refusing part with the longest retry; the parts after the first refusal are peeked', () => {
    const at = clock();
    const minute = new KeyedRateLimiter({ algorithm: () => new FixedWindow(new Rule(1, 60_000)), clock: at });
    const log = new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(new Rule(1, 10_000)), clock: at });
    admit([{ limiter: minute, key: 'k' }, { limiter: log, key: 'k' }]);
    at.advance(1000);
    const refused = admit([{ limiter: log, key: 'k' }, { limiter: minute, key: 'k' }]);
    expect(refused.parts.map((d) => d.retryAfterMs)).toEqual([9000, 59_000]);
    expect(refused.decision).toBe(refused.parts[1]);
    expect(log.size + minute.size).toBe(2);
  });

  it('the same limiter and key twice are two reservations, decided in order and given back together', () => {
    const limiter = bucket(10);
    const refused = admit([
      { limiter, key: 'k', permits: 6 },
      { limiter, key: 'k', permits: 6 },
    ]);
    expect(refused.parts.map((d) => [d.allowed, d.remaining])).toEqual([[true, 4], [false, 4]]);
    expect(limiter.peek('k', 0).remaining).toBe(10);
    const granted = admit([
      { limiter, key: 'k', permits: 6 },
      { limiter, key: 'k', permits: 4 },
    ]);
    expect(granted.decision.remaining).toBe(0);
    granted.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(10);
  });

  it('settles once: one number per part (all checked first), a second settle or cancel throws; a refusal settles to nothing, any number of times', () => {
    const limiter = bucket(10);
    const admission = admit([{ limiter, key: 'a', permits: 5 }, { limiter, key: 'b', permits: 5 }]);
    expect(() => admission.settle([1])).toThrow(coded('TypeError', 'ratekeeper: `actual` must be an array of one number per part (2), got 1 numbers'));
    expect(() => admission.settle(3 as unknown as number[])).toThrow(expect.objectContaining({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' }));
    expect(() => admission.settle([0, -1])).toThrow(coded('RangeError', 'ratekeeper: `actual[1]` must be a safe integer of at least 0, got -1'));
    expect(limiter.peek('a', 0).remaining).toBe(5);
    admission.settle([0, 5]);
    expect(() => admission.settle([0, 0])).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' }));
    expect(() => admission.cancel()).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' }));
    expect([limiter.peek('a', 0).remaining, limiter.peek('b', 0).remaining]).toEqual([10, 5]);
    const refused = admit([{ limiter, key: 'b', permits: 6 }]);
    expect(refused.settle([9])).toEqual(refused.parts);
    refused.cancel();
    refused.cancel();
    expect(limiter.peek('b', 0).remaining).toBe(5);
  });

  it('refuses bad parts, naming them; a part whose limiter throws gives back the parts granted before it', () => {
    const limiter = bucket(3);
    expect(() => admit('x' as never)).toThrow(coded('TypeError', 'ratekeeper: `parts` must be an array of { limiter, key, permits? }, got "x"'));
    expect(() => admit([])).toThrow(coded('RangeError', 'ratekeeper: `parts` must hold at least one part, got an empty array'));
    expect(() => admit([null as never])).toThrow(coded('TypeError', 'ratekeeper: `parts[0]` must be an object, got null'));
    expect(() => admit([{ limiter: { tryAcquire: () => undefined } as never, key: 'k' }])).toThrow(coded('TypeError', 'ratekeeper: `parts[0].limiter` must have reserve(key, permits) and peek(key, permits) methods, got an object'));
    expect(() => admit([{ limiter, key: 'k' }], { onError: 1 as never })).toThrow(coded('TypeError', 'ratekeeper: `onError` must be a function, got 1'));
    expect(() => admit([{ limiter, key: 'k', permits: 2 }, { limiter, key: 'k', permits: 4 }])).toThrow(coded('RangeError', 'ratekeeper: `permits` must be an integer from 1 to 3, got 4'));
    expect(limiter.peek('k', 0).remaining).toBe(3);
    // A part after a refusal that throws as it is peeked: the parts granted before are given back too.
    const full = bucket(1);
    full.tryAcquire('k');
    expect(() => admit([{ limiter, key: 'k', permits: 2 }, { limiter: full, key: 'k' }, { limiter, key: 'k', permits: 9 }])).toThrow(
      coded('RangeError', 'ratekeeper: `permits` must be an integer from 1 to 3, got 9'),
    );
    expect(limiter.peek('k', 0).remaining).toBe(3);
  });
});

describe('admit with parts that answer as Promises (store parts)', () => {
  it('resolves once decided; a refusal resolves after the granted parts are given back; settles through the stores', async () => {
    const at = clock();
    const perUser = bucket(5, at);
    const org = asStore(bucket(3, at));
    const pending = admit([{ limiter: perUser, key: 'u' }, { limiter: org, key: 'o', permits: 3 }]);
    expect(pending).toBeInstanceOf(Promise);
    const granted = await pending;
    expect(granted.decision.remaining).toBe(0);
    const refused = await admit([{ limiter: perUser, key: 'u' }, { limiter: org, key: 'o' }, { limiter: perUser, key: 'u', permits: 5 }]);
    expect(refused.parts.map((d) => d.allowed)).toEqual([true, false, false]);
    expect(perUser.peek('u', 0).remaining).toBe(4);
    await expect(granted.settle([0, 1])).resolves.toEqual([expect.objectContaining({ remaining: 5 }), expect.objectContaining({ remaining: 2 })]);
    await expect(granted.cancel()).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
    await expect(refused.cancel()).resolves.toBeUndefined();
  });

  it('a store part after an in-memory refusal is peeked, and the admission is then a Promise', async () => {
    const memory = bucket(1);
    memory.tryAcquire('k');
    const store = asStore(bucket(2));
    const refused = await admit([{ limiter: memory, key: 'k' }, { limiter: store, key: 'k', permits: 2 }]);
    expect(refused.parts).toEqual([expect.objectContaining({ allowed: false }), expect.objectContaining({ allowed: true, remaining: 0 })]);
    expect(await store.peek('k', 0)).toMatchObject({ remaining: 2 });
  });

  it('a cancel that fails leaves the admission refused and goes to onError with the part; its permits stay spent', async () => {
    const failing = asStore(bucket(5), new Error('connection lost'));
    const full = bucket(1);
    full.tryAcquire('k');
    const heard: [unknown, number][] = [];
    const refused = await admit([{ limiter: failing, key: 'k', permits: 2 }, { limiter: full, key: 'k' }], { onError: (error, part) => void heard.push([error, part]) });
    expect(refused.decision.allowed).toBe(false);
    expect(heard).toEqual([[new Error('connection lost'), 0]]);
    expect(await failing.peek('k', 0)).toMatchObject({ remaining: 3 });
    // Without onError the failure is dropped, and one that throws is too.
    await expect(admit([{ limiter: failing, key: 'k' }, { limiter: full, key: 'k' }], { onError: () => { throw new Error('hook'); } })).resolves.toMatchObject({ decision: { allowed: false } });
  });

  it('a store reserve that rejects rejects the admission, after giving back the parts granted before it', async () => {
    const memory = bucket(5);
    const broken: AdmittingRateLimiter = { reserve: () => Promise.reject(new TypeError('bad rule')), peek: () => Promise.reject(new Error('unused')) };
    await expect(admit([{ limiter: memory, key: 'k', permits: 5 }, { limiter: broken, key: 'k' }])).rejects.toThrow('bad rule');
    expect(memory.peek('k', 0).remaining).toBe(5);
  });

  it('settling tries every part and rejects with the first failure', async () => {
    const memory = bucket(5);
    const store = asStore(bucket(5));
    const admission = await admit([{ limiter: store, key: 'k', permits: 2 }, { limiter: memory, key: 'k', permits: 2 }]);
    await expect(admission.settle([0, 0])).resolves.toHaveLength(2);
    expect(memory.peek('k', 0).remaining).toBe(5);
    const failing = asStore(bucket(5));
    const settleFails: AdmittingRateLimiter = {
      reserve: async (key, permits) => {
        const { decision, cancel } = (await failing.reserve(key, permits)) as AsyncReservation;
        return { decision, cancel, settle: () => Promise.reject(new Error('gone')) };
      },
      peek: failing.peek,
    };
    const broken = await admit([{ limiter: settleFails, key: 'k' }, { limiter: memory, key: 'k', permits: 3 }]);
    await expect(broken.settle([1, 0])).rejects.toThrow('gone');
    expect(memory.peek('k', 0).remaining).toBe(5);
  });
});

describe('admit types', () => {
  it('is a MemoryAdmission for parts in memory, and may be a Promise once a store part is among them', () => {
    const memory = bucket(3);
    expectTypeOf(admit([{ limiter: memory, key: 'k' }])).toEqualTypeOf<MemoryAdmission>();
    expectTypeOf(admit([{ limiter: memory, key: 'k' }]).settle([1])).toEqualTypeOf<Decision[]>();
    const mixed = (store: RedisRateLimiter) => admit([{ limiter: memory, key: 'k' }, { limiter: store, key: 'k', permits: 2 }]);
    expectTypeOf(mixed).returns.toEqualTypeOf<MemoryAdmission | Promise<StoreAdmission>>();
    expectTypeOf<ReturnType<Awaited<ReturnType<typeof mixed>>['settle']>>().toEqualTypeOf<Decision[] | Promise<Decision[]>>();
    // @ts-expect-error a part needs a key
    expect(() => admit([{ limiter: memory }])).toThrow(expect.objectContaining({ code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' }));
  });
});
