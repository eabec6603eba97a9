// Shutting down: close() and `using` end every wait, clear every timer, and leave deciding alone.
import { inspect } from 'node:util';
import { createContext, runInContext } from 'node:vm';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import {
  Composite,
  FixedWindow,
  KeyedRateLimiter,
  LeakyBucket,
  ManualClock,
  ManualScheduler,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  WaitQueue,
  type Decision,
} from '../../src/index';

const bucket = (limit: number, windowMs: number) => () => new TokenBucket(new Rule(limit, windowMs));
const codeOf = (promise: Promise<unknown>) => promise.then(() => 'resolved', (error: { code?: string; name?: string }) => `${error.name} ${error.code}`);

describe('KeyedRateLimiter.close', () => {
  it('rejects every waiter with ERR_RATEKEEPER_CLOSED, spending nothing, and clears every timer', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(1, 60_000), clock: scheduler });
    limiter.tryAcquire('a');
    limiter.tryAcquire('b');
    const waits = [limiter.acquire('a'), limiter.acquire('a'), limiter.acquire('b', 1, { maxWaitMs: Infinity })].map(codeOf);
    expect(scheduler.pending).toBe(2);
    limiter.close();
    expect(scheduler.pending).toBe(0);
    expect(await Promise.all(waits)).toEqual(Array(3).fill('ClosedError ERR_RATEKEEPER_CLOSED'));
    scheduler.advance(60_000);
    // Nothing was spent by the waiters: each key has exactly its refilled permit.
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('then rejects later waits at once, keeps deciding without waiting, and closes again harmlessly', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(2, 1000), clock: scheduler });
    limiter.close();
    limiter.close();
    await expect(limiter.acquire('k')).rejects.toMatchObject({ name: 'ClosedError', code: 'ERR_RATEKEEPER_CLOSED', message: 'ratekeeper: the limiter was closed' });
    expect(limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    expect(scheduler.pending).toBe(0);
  });

  it('is what `using` and `await using` call', async () => {
    const scheduler = new ManualScheduler();
    let waiting: Promise<string> | undefined;
    {
      using limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000), clock: scheduler });
      limiter.tryAcquire('k');
      waiting = codeOf(limiter.acquire('k'));
    }
    expect(await waiting).toBe('ClosedError ERR_RATEKEEPER_CLOSED');
    {
      await using limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000), clock: scheduler });
      limiter.tryAcquire('k');
      waiting = codeOf(limiter.acquire('k'));
    }
    expect(await waiting).toBe('ClosedError ERR_RATEKEEPER_CLOSED');
    expect(scheduler.pending).toBe(0);
  });

  it('answers to the well-known symbols where the runtime has them', () => {
    const limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000) });
    expect(typeof limiter[Symbol.dispose]).toBe('function');
    expect(typeof limiter[Symbol.asyncDispose]).toBe('function');
    expect(Object.getOwnPropertyNames(Object.getPrototypeOf(Object.getPrototypeOf(limiter)))).not.toContain('undefined');
  });
});

describe('a runtime without Symbol.dispose', () => {
  it('gets the registered symbols transpilers use instead, and no method named "undefined"', async () => {
    // A fresh realm has no Symbol.dispose on Node 20 (Node adds it to the main realm only), as in
    // older browsers. The source bundled as tsup bundles it (esbuild, CommonJS, es2022) is
    // self-contained, so it runs there as it is; bundling here needs no `npm run build` first.
    const { outputFiles } = await build({ entryPoints: ['src/index.ts'], bundle: true, format: 'cjs', target: 'es2022', platform: 'neutral', write: false });
    const realm = createContext({ performance, setTimeout, clearTimeout });
    expect(runInContext('typeof Symbol.dispose', realm)).toBe('undefined');
    const module = { exports: {} as Record<string, new (...args: never[]) => object> & { Rule: { perSecond(n: number): object } } };
    const load = runInContext(`(function (module, exports) {${outputFiles[0]!.text}\n})`, realm) as (m: unknown, e: unknown) => void;
    load(module, module.exports);
    const { KeyedRateLimiter: Limiter, TokenBucket: Bucket, Rule: R } = module.exports;
    const limiter = new (Limiter as new (options: object) => Record<PropertyKey, unknown>)({ algorithm: () => new (Bucket as new (rule: object) => object)(R.perSecond(1)) });
    expect(typeof limiter[Symbol.for('Symbol.dispose')]).toBe('function');
    expect(typeof limiter[Symbol.for('Symbol.asyncDispose')]).toBe('function');
    expect('undefined' in limiter).toBe(false);
  });
});

describe('WaitQueue.close', () => {
  it('rejects a waiter whose attempt is on its way to a store at once, and ignores the late answer', async () => {
    let answer: ((decision: Decision) => void) | undefined;
    const queue = new WaitQueue(() => new Promise<Decision>((resolve) => (answer = resolve)), new ManualScheduler());
    const head = codeOf(queue.acquire('k'));
    const behind = codeOf(queue.acquire('k'));
    queue.close();
    expect(await Promise.all([head, behind])).toEqual(['ClosedError ERR_RATEKEEPER_CLOSED', 'ClosedError ERR_RATEKEEPER_CLOSED']);
    answer?.({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1 });
    await Promise.resolve();
    expect(queue.toJSON()).toEqual({ waitingKeys: 0, closed: true });
  });

  it('stops listening for aborts', async () => {
    const controller = new AbortController();
    const queue = new WaitQueue(() => ({ allowed: false, limit: 1, remaining: 0, retryAfterMs: 1000, resetAfterMs: 1000 }), new ManualScheduler());
    const waiting = codeOf(queue.acquire('k', 1, { signal: controller.signal }));
    queue.close();
    controller.abort(new Error('late'));
    expect(await waiting).toBe('ClosedError ERR_RATEKEEPER_CLOSED');
  });
});

describe('maxWaitMs: Infinity', () => {
  it('is accepted and means no limit, as leaving it out does', async () => {
    const scheduler = new ManualScheduler();
    const limiter = new KeyedRateLimiter({ algorithm: bucket(1, 1000), clock: scheduler });
    limiter.tryAcquire('k');
    const waiting = limiter.acquire('k', 1, { maxWaitMs: Infinity });
    scheduler.advance(1000);
    expect(await waiting).toMatchObject({ allowed: true });
  });
});

describe('what logs show', () => {
  it('each public class prints its summary under its own name, never the keys or scaled internals', () => {
    const limiter = new KeyedRateLimiter({ algorithm: bucket(4, 1000), clock: new ManualClock(), maxKeys: 10 });
    limiter.tryAcquire('secret-user-key');
    const printed = inspect(limiter);
    expect(printed).toBe('KeyedRateLimiter { size: 1, maxKeys: 10 }');
    expect(JSON.stringify(limiter)).toBe('{"size":1,"maxKeys":10}');
    expect(printed + JSON.stringify(limiter)).not.toContain('secret');
    const rule = Rule.perSecond(4);
    expect(inspect(rule)).toBe('Rule { limit: 4, windowMs: 1000 }');
    expect(inspect(new TokenBucket(rule))).toBe("TokenBucket { algorithm: 'token-bucket', rule: Rule { limit: 4, windowMs: 1000 } }");
    expect(inspect(new LeakyBucket(rule))).toBe("LeakyBucket { algorithm: 'leaky-bucket', rule: Rule { limit: 4, windowMs: 1000 } }");
    expect(JSON.stringify(new Composite([new FixedWindow(rule), new SlidingWindowLog(Rule.perMinute(9)), new SlidingWindowCounter(rule)]))).toBe(
      '{"algorithm":"composite","parts":[{"algorithm":"fixed-window","rule":{"limit":4,"windowMs":1000}},' +
        '{"algorithm":"sliding-window-log","rule":{"limit":9,"windowMs":60000}},{"algorithm":"sliding-window-counter","rule":{"limit":4,"windowMs":1000}}]}',
    );
    expect(inspect(new ManualClock(5))).toBe('ManualClock { now: 5 }');
    expect(inspect(new ManualScheduler(7))).toBe('ManualScheduler { now: 7, pending: 0 }');
    expect(inspect(new WaitQueue(() => ({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0 })))).toBe('WaitQueue { waitingKeys: 0, closed: false }');
  });

  it('a TokenBucket prints its rule, not the scaled units it counts in', () => {
    const bucket = new TokenBucket(new Rule(3, 1000));
    bucket.tryAcquire(0);
    expect(inspect(bucket)).not.toMatch(/units|perMs|perToken|capacity/);
  });
});
