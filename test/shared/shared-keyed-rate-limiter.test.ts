import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, ManualScheduler, Rule, TokenBucket } from '../../src/index';
import { SharedKeyedRateLimiter } from '../../src/shared';

const make = (options: Partial<ConstructorParameters<typeof SharedKeyedRateLimiter>[0]> = {}) =>
  new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(4), maxKeys: 100, clock: new ManualClock(0), ...options });

const codeOf = (run: () => unknown): unknown => {
  try {
    run();
  } catch (error) {
    return [(error as Error).name, (error as { code?: string }).code, (error as Error).message];
  }
  return 'no error';
};

describe('SharedKeyedRateLimiter', () => {
  it('two limiters on one buffer share each key, as two threads would', () => {
    const clock = new ManualClock(0);
    const a = make({ clock });
    const b = SharedKeyedRateLimiter.attach(a.buffer, { clock });
    expect(a.tryAcquire('k', 3).remaining).toBe(1);
    expect(b.tryAcquire('k')).toEqual({ allowed: true, limit: 4, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 });
    expect(a.tryAcquire('k')).toEqual({ allowed: false, limit: 4, remaining: 0, retryAfterMs: 250, resetAfterMs: 1000 });
    expect([a.size, b.size]).toEqual([1, 1]);
    expect(b.algorithm).toBe('token-bucket');
    expect(b.rule).toEqual({ limit: 4, windowMs: 1000 });
  });

  it('a new key that finds no room is refused as key-table-full, and spends nothing', () => {
    const clock = new ManualClock(0);
    const limiter = make({ maxKeys: 2, clock });
    limiter.tryAcquire('a');
    limiter.tryAcquire('b');
    const twin = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)), maxKeys: 2, clock });
    twin.tryAcquire('a');
    twin.tryAcquire('b');
    expect(limiter.tryAcquire('c')).toEqual(twin.tryAcquire('c'));
    expect(limiter.tryAcquire('c')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    expect(limiter.size).toBe(2);
    clock.advance(250); // 'a' and 'b' are full again: idle, so their slots may go
    expect(limiter.tryAcquire('c').allowed).toBe(true);
    expect(limiter.size).toBe(2);
  });

  it('attach refuses what is not its buffer, and a buffer holding another algorithm or rule than expected', () => {
    const limiter = make({ algorithm: 'fixed-window', rule: Rule.perMinute(60) });
    expect(codeOf(() => SharedKeyedRateLimiter.attach(new SharedArrayBuffer(256)))).toEqual([
      'TypeError',
      'ERR_RATEKEEPER_INVALID_ARGUMENT',
      'ratekeeper: `buffer` must be the .buffer of a SharedKeyedRateLimiter, got a SharedArrayBuffer of something else',
    ]);
    expect((codeOf(() => SharedKeyedRateLimiter.attach(new ArrayBuffer(256) as unknown as SharedArrayBuffer)) as unknown[]).slice(0, 2)).toEqual(['TypeError', 'ERR_RATEKEEPER_INVALID_ARGUMENT']);
    expect(codeOf(() => SharedKeyedRateLimiter.attach(limiter.buffer, { algorithm: 'token-bucket' }))).toEqual([
      'TypeError',
      'ERR_RATEKEEPER_INVALID_ARGUMENT',
      "ratekeeper: the buffer runs 'fixed-window', not \"token-bucket\" as this thread expects",
    ]);
    expect(codeOf(() => SharedKeyedRateLimiter.attach(limiter.buffer, { rule: Rule.perSecond(1) }))).toEqual([
      'TypeError',
      'ERR_RATEKEEPER_INVALID_ARGUMENT',
      "ratekeeper: the buffer's rule is Rule(60, 60000), not Rule(1, 1000) as this thread expects",
    ]);
    expect(SharedKeyedRateLimiter.attach(limiter.buffer, { algorithm: 'fixed-window', rule: Rule.perMinute(60) }).tryAcquire('k').remaining).toBe(59);
  });

  it("attach of a buffer too small, or not a whole number of words, throws the coded TypeError, not V8's RangeError", () => {
    for (const bytes of [0, 120, 130, 135]) {
      expect(codeOf(() => SharedKeyedRateLimiter.attach(new SharedArrayBuffer(bytes)))).toEqual([
        'TypeError',
        'ERR_RATEKEEPER_INVALID_ARGUMENT',
        `ratekeeper: \`buffer\` must be the .buffer of a SharedKeyedRateLimiter, got a SharedArrayBuffer of ${bytes} bytes`,
      ]);
    }
    const made = make();
    const longer = new SharedArrayBuffer(made.buffer.byteLength + 4);
    new Uint8Array(longer).set(new Uint8Array(made.buffer));
    expect((codeOf(() => SharedKeyedRateLimiter.attach(longer)) as unknown[]).slice(0, 2)).toEqual(['TypeError', 'ERR_RATEKEEPER_INVALID_ARGUMENT']);
  });

  it('a key with a lone surrogate is refused with the TypeError KeyedRateLimiter throws; well-formed keys stay apart', async () => {
    const limiter = make();
    const twin = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)) });
    for (const key of ['alice\uD800', 'alice\uDBFF', '\uDC00x']) {
      expect(codeOf(() => limiter.tryAcquire(key))).toEqual(codeOf(() => twin.tryAcquire(key)));
      expect(codeOf(() => limiter.peek(key))).toEqual(codeOf(() => twin.peek(key)));
      await expect(limiter.acquire(key)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    }
    expect(codeOf(() => limiter.tryAcquire('alice\uD800'))).toEqual([
      'TypeError',
      'ERR_RATEKEEPER_INVALID_ARGUMENT',
      'ratekeeper: `key` must be well-formed UTF-16 (no lone surrogate), got "alice\\ud800"',
    ]);
    expect(limiter.size).toBe(0);
    expect(limiter.tryAcquire('alice\uFFFD', 4).remaining).toBe(0);
    expect(limiter.tryAcquire('alice\uD83D\uDE00').remaining).toBe(3); // a surrogate pair is a character
  });

  it('refuses at construction a rule its word cannot count exactly for ten years, saying what fits', () => {
    expect(codeOf(() => make({ algorithm: 'sliding-window-counter', rule: Rule.perSecond(1_000_000) }))).toEqual([
      'RangeError',
      'ERR_RATEKEEPER_OUT_OF_RANGE',
      'ratekeeper: Rule(1000000, 1000) does not fit a shared sliding-window-counter: its 64-bit word would count only 16777215999 ms, less than ten years (see docs/threads.md)',
    ]);
    expect(codeOf(() => make({ algorithm: 'sliding-window-log', rule: Rule.perMinute(5000) }))).toEqual([
      'RangeError',
      'ERR_RATEKEEPER_OUT_OF_RANGE',
      'ratekeeper: Rule(5000, 60000) does not fit a shared sliding-window-log: a shared log keeps at most 4095 timestamps per key (use sliding-window-counter or token-bucket)',
    ]);
    expect((codeOf(() => make({ algorithm: 'token-bucket', rule: new Rule(2 ** 53 - 1, 1) })) as unknown[]).slice(0, 2)).toEqual(['RangeError', 'ERR_RATEKEEPER_OUT_OF_RANGE']);
    expect(codeOf(() => make({ rule: { limit: 10, windowMs: 1.5 } as Rule }))).toEqual(['RangeError', 'ERR_RATEKEEPER_OUT_OF_RANGE', 'ratekeeper: `rule.windowMs` must be an integer from 1 to 4398046511104, got 1.5']);
    // Realistic large rules fit.
    expect(make({ algorithm: 'token-bucket', rule: new Rule(1e9, 1000) }).tryAcquire('k', 1e9).allowed).toBe(true);
    expect(make({ algorithm: 'token-bucket', rule: new Rule(1e9, 86_400_000) }).tryAcquire('k').remaining).toBe(1e9 - 1);
    expect(make({ algorithm: 'fixed-window', rule: new Rule(1e9, 1000) }).tryAcquire('k').remaining).toBe(1e9 - 1);
    expect(make({ algorithm: 'sliding-window-counter', rule: Rule.perSecond(100_000) }).tryAcquire('k').remaining).toBe(99_999);
    expect(make({ algorithm: 'sliding-window-log', rule: new Rule(4095, 2 ** 42) }).tryAcquire('k').remaining).toBe(4094);
  });

  it('checks its options and arguments', () => {
    expect(codeOf(() => make({ maxKeys: 0 }))).toEqual(['RangeError', 'ERR_RATEKEEPER_OUT_OF_RANGE', 'ratekeeper: `maxKeys` must be an integer from 1 to 53687091, got 0']);
    expect((codeOf(() => make({ algorithm: 'leaky' as 'leaky-bucket' })) as unknown[]).slice(0, 2)).toEqual(['TypeError', 'ERR_RATEKEEPER_INVALID_ARGUMENT']);
    expect((codeOf(() => make({ rule: { limit: 3 } as Rule })) as unknown[]).slice(0, 2)).toEqual(['TypeError', 'ERR_RATEKEEPER_INVALID_ARGUMENT']);
    // A rule from another copy of ratekeeper is read by its fields.
    expect(make({ rule: { limit: 3, windowMs: 1000 } as Rule }).tryAcquire('k').remaining).toBe(2);
    const limiter = make();
    expect(codeOf(() => limiter.tryAcquire('k', 5))).toEqual(['RangeError', 'ERR_RATEKEEPER_OUT_OF_RANGE', 'ratekeeper: `permits` must be an integer from 1 to 4, got 5']);
    expect((codeOf(() => limiter.tryAcquire(7 as unknown as string)) as unknown[]).slice(0, 2)).toEqual(['TypeError', 'ERR_RATEKEEPER_INVALID_ARGUMENT']);
    expect(limiter.size).toBe(0);
  });

  it('acquire waits on timers for the exact retry time, and close() settles waiters with ERR_RATEKEEPER_CLOSED, tryAcquire keeps answering', async () => {
    const scheduler = new ManualScheduler(0);
    const limiter = make({ clock: scheduler });
    await limiter.acquire('k', 4);
    const waiting = limiter.acquire('k', 2);
    await scheduler.advance(499);
    let settled = false;
    void waiting.then(() => (settled = true));
    await Promise.resolve();
    expect(settled).toBe(false);
    await scheduler.advance(1);
    expect(await waiting).toMatchObject({ allowed: true, remaining: 0 });
    const stopped = limiter.acquire('k', 4).catch((error: { code?: string }) => error.code);
    limiter.close();
    expect(await stopped).toBe('ERR_RATEKEEPER_CLOSED');
    expect(await limiter.acquire('k').catch((error: { code?: string }) => error.code)).toBe('ERR_RATEKEEPER_CLOSED');
    // Calls that do not wait keep answering, as on KeyedRateLimiter; the buffer is untouched.
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: false, remaining: 0 });
    expect(SharedKeyedRateLimiter.attach(limiter.buffer, { clock: scheduler }).peek('k').retryAfterMs).toBe(250);
  });

  it('prints a summary, never its keys, and closes under using', () => {
    const clock = new ManualClock(0);
    let buffer: SharedArrayBuffer;
    {
      using limiter = make({ clock });
      limiter.tryAcquire('secret-key');
      buffer = limiter.buffer;
      expect(JSON.stringify(limiter)).toBe('{"algorithm":"token-bucket","limit":4,"windowMs":1000,"size":1,"maxKeys":100}');
    }
    expect(SharedKeyedRateLimiter.attach(buffer, { clock }).tryAcquire('secret-key').remaining).toBe(2);
  });

  it('acquire with a signal: abort rejects with its reason and spends nothing', async () => {
    const scheduler = new ManualScheduler(0);
    const limiter = make({ clock: scheduler });
    limiter.tryAcquire('k', 4);
    const controller = new AbortController();
    const waiting = limiter.acquire('k', 1, { signal: controller.signal });
    controller.abort(new Error('gave up'));
    await expect(waiting).rejects.toThrow('gave up');
    await scheduler.advance(250);
    expect(limiter.tryAcquire('k').allowed).toBe(true);
  });
});
