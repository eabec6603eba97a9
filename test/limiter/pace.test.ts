import { fc, test } from '@fast-check/vitest';
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualScheduler, pace, RateLimitedError, Rule, TokenBucket } from '../../src/index';
import { algorithms, boundName, type Grant, recording, worstExcess } from '../support/algorithms';
import { rangeError, typeError } from '../../src/core/errors';

const callsArb = fc
  .record({ limit: fc.integer({ min: 1, max: 5 }), windowMs: fc.constantFrom(1000, 7, 250) })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs))
  .chain((rule) =>
    fc.record({
      rule: fc.constant(rule),
      calls: fc.array(fc.record({ dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: rule.windowMs })), permits: fc.integer({ min: 1, max: rule.limit }) }), {
        minLength: 1,
        maxLength: 15,
      }),
    }),
  );

describe.each(algorithms)('pace with $name', ({ make, bound }) => {
  test.prop([callsArb])('pacing keeps call order, runs every call, and never beyond the limit', async ({ rule, calls }) => {
    const scheduler = new ManualScheduler();
    const grants: Grant[] = [];
    const limiter = new KeyedRateLimiter({ algorithm: () => recording(make(rule), grants), clock: scheduler });
    const started: number[] = [];
    const paced = pace(async (i: number) => (started.push(i), i * 10), { limiter, key: 'k', permits: (i) => calls[i]?.permits ?? 1 });
    const results = calls.map(({ dt }, i) => {
      scheduler.advance(dt);
      return paced(i);
    });
    while (scheduler.pending > 0) scheduler.advance(rule.windowMs);
    expect(await Promise.all(results)).toEqual(calls.map((_, i) => i * 10));
    expect(started).toEqual(calls.map((_, i) => i));
    expect(grants.map((g) => g.permits)).toEqual(calls.map((c) => c.permits));
    expect(worstExcess(bound, rule, grants), boundName(bound)).toBeLessThanOrEqual(0);
  });
});

describe('pace', () => {
  it('sends two hundred queued uploads five at once, then five a second, in order', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(5)), clock: scheduler });
    const sent: [string, number][] = [];
    const upload = async (file: string) => {
      sent.push([file, scheduler.now()]);
      await Promise.resolve(); // the request itself
      return `${file} ok`;
    };
    const pacedUpload = pace(upload, { limiter, key: 'uploads' });
    const files = Array.from({ length: 200 }, (_, i) => `photo-${i}.jpg`);
    const done = Promise.all(files.map((file) => pacedUpload(file)));
    await scheduler.advanceAsync(40_000);
    expect(await done).toEqual(files.map((file) => `${file} ok`));
    expect(sent).toEqual(files.map((file, i) => [file, i < 5 ? 0 : (i - 4) * 200]));
  });

  it('stops the calls still waiting on abort, spending nothing, and leaves running calls alone', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: scheduler });
    const controller = new AbortController();
    let release: () => void = () => {};
    const ran: number[] = [];
    const paced = pace(
      (i: number) => {
        ran.push(i);
        return new Promise<number>((resolve) => (release = () => resolve(i)));
      },
      { limiter, key: 'k', signal: controller.signal },
    );
    const first = paced(1);
    const second = paced(2);
    await Promise.resolve();
    controller.abort(new Error('offline again'));
    await expect(second).rejects.toThrow('offline again');
    await expect(paced(3)).rejects.toThrow('offline again');
    release();
    expect(await first).toBe(1);
    expect(ran).toEqual([1]);
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1000 }); // only the first spent
    expect(scheduler.pending).toBe(0);
  });

  it('listens once on its signal however many calls wait: two hundred calls, one abort listener', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(5)), clock: scheduler });
    const online = new AbortController();
    const paced = pace(async (i: number) => i, { limiter, key: 'uploads', signal: online.signal });
    const calls = Array.from({ length: 200 }, (_, i) => paced(i));
    expect(getEventListeners(online.signal, 'abort')).toHaveLength(1);
    online.abort(new Error('offline'));
    const settled = await Promise.allSettled(calls);
    expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(5);
    expect(settled.filter((s) => s.status === 'rejected' && (s.reason as Error).message === 'offline')).toHaveLength(195);
    await expect(paced(201)).rejects.toThrow('offline');
  });

  it('rejects a call that would wait longer than maxWaitMs with a RateLimitedError carrying the refusal', async () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: new ManualScheduler() });
    const paced = pace(async () => 'sent', { limiter, key: 'k', maxWaitMs: 500 });
    expect(await paced()).toBe('sent');
    const error: unknown = await paced().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitedError);
    expect(error).toMatchObject({ name: 'RateLimitedError', message: 'ratekeeper: rate limited on "k", retry in 1000 ms', decision: { allowed: false, retryAfterMs: 1000 } });
  });

  it('passes arguments and this, picks key and permits per call, and lets one failure not stop the rest', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(10)), clock: scheduler });
    const client = {
      host: 'api',
      send: pace(
        async function (this: { host: string }, path: string, megabytes: number) {
          if (path === '/bad') throw new Error('500');
          return `${this.host}${path} ${megabytes}MB at ${scheduler.now()}`;
        },
        { limiter, key: (path) => path.split('/')[1] ?? '', permits: (_, megabytes) => megabytes },
      ),
    };
    // Settle-watching starts before time moves, so the failing call is never an unhandled rejection.
    const settled = Promise.allSettled([client.send('/a', 6), client.send('/bad', 1), client.send('/a', 6), client.send('/b', 10)]);
    await scheduler.advanceAsync(1000);
    expect(await settled).toEqual([
      { status: 'fulfilled', value: 'api/a 6MB at 0' },
      { status: 'rejected', reason: new Error('500') },
      { status: 'fulfilled', value: 'api/a 6MB at 200' },
      { status: 'fulfilled', value: 'api/b 10MB at 0' },
    ]);
  });

  it('refuses bad options with errors naming them', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)) });
    const fn = async () => {};
    expect(() => pace('upload' as never, { limiter, key: 'k' })).toThrow(typeError('ratekeeper: `fn` must be a function, got "upload"'));
    expect(() => pace(fn, null as never)).toThrow(typeError('ratekeeper: pace options must be an object, got null'));
    expect(() => pace(fn, { limiter: {} as never, key: 'k' })).toThrow(typeError('ratekeeper: `limiter` must have an acquire() or a lease() method, got an object'));
    expect(() => pace(fn, { limiter, key: 7 as never })).toThrow(typeError('ratekeeper: `key` must be a string or a function returning one, got 7'));
    expect(() => pace(fn, { limiter, key: 'k', permits: 0 })).toThrow(rangeError('ratekeeper: `permits` must be a safe integer of at least 1, got 0'));
    expect(() => pace(fn, { limiter, key: 'k', signal: {} as never })).toThrow(typeError('ratekeeper: `signal` must be an AbortSignal, got an object'));
    expect(() => pace(fn, { limiter, key: 'k', maxWaitMs: -1 })).toThrow(rangeError('ratekeeper: `maxWaitMs` must be a number of at least 0 (Infinity for no limit), got -1'));
  });

  it('waits on real timers while the event loop keeps turning', async () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(2, 60)) });
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 5);
    const paced = pace(async (i: number) => i, { limiter, key: 'k' });
    const started = performance.now();
    expect(await Promise.all([0, 1, 2, 3, 4, 5].map((i) => paced(i)))).toEqual([0, 1, 2, 3, 4, 5]);
    clearInterval(ticker);
    expect(performance.now() - started).toBeGreaterThanOrEqual(100); // four more, one per 30 ms
    expect(ticks).toBeGreaterThanOrEqual(5);
  });
});
