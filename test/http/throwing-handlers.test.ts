// Settling after the response when the handler throws (issue 23, items 19 and 21, and the
// onSettleError bullet): src/http/fetch-adapter.ts, hono-adapter.ts and request-limit.ts, on real
// servers over loopback. Express and Fastify answer a throw with 500 and settle by it; Hono and the
// Fetch wrapper must too, whatever is thrown.
import { afterEach, describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import { ADAPTERS, start, type Adapter, type Running, type Setup, type ThrowingPath } from './support/servers';

const threePerMinute = () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(3, 60_000)), clock: new ManualClock(0) });
const key = () => 'k';

/** Waits (real time, generously bounded) until `done()`: settling runs after the response. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
}

function useServer() {
  let server: Running | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });
  return async (adapter: Adapter, setup: Setup) => {
    server = await start(adapter, setup);
    return (path: string) => fetch(`${server?.url}${path}`);
  };
}

describe.each(ADAPTERS)('%s: a handler that throws an Error', (adapter) => {
  const serve = useServer();

  it.each<[string, Partial<Setup>]>([
    ['skipFailedRequests', { skipFailedRequests: true }],
    ['settle', { settle: (status) => (status >= 500 ? 0 : 1) }],
  ])('with %s: answers 500 and gives the permits back', async (_, options) => {
    const limiter = threePerMinute();
    const get = await serve(adapter, { limiter, key, ...options });
    for (let i = 0; i < 5; i++) {
      expect((await get('/throw')).status).toBe(500);
      await until(() => limiter.peek('k', 0).remaining === 3);
      expect(limiter.peek('k', 0).remaining).toBe(3);
    }
  });
});

// Hono passes anything but an `Error` on to the server instead of to its error handler.
describe.each<Adapter>(['hono', 'fetch'])('%s: a handler that throws what is no Error', (adapter) => {
  const serve = useServer();

  it.each<ThrowingPath>(['/throw/string', '/throw/object', '/throw/response'])('%s answers 500 and, with skipFailedRequests, gives the permits back', async (path) => {
    const limiter = threePerMinute();
    const get = await serve(adapter, { limiter, key, skipFailedRequests: true });
    for (let i = 0; i < 5; i++) {
      expect((await get(path)).status).toBe(500);
      await until(() => limiter.peek('k', 0).remaining === 3);
      expect(limiter.peek('k', 0).remaining).toBe(3);
    }
    expect((await get('/')).status).toBe(200);
  });
});

describe.each(ADAPTERS)('%s: settling never rejects', (adapter) => {
  const serve = useServer();

  it('an onSettleError that throws is no unhandled rejection', async () => {
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    try {
      const heard: unknown[] = [];
      const settle = () => {
        throw new Error('settle failed');
      };
      const onSettleError = (error: unknown) => {
        heard.push(error);
        throw new Error('the hook failed too');
      };
      const get = await serve(adapter, { limiter: threePerMinute(), key, settle, onSettleError });
      expect((await get('/')).status).toBe(200);
      await until(() => heard.length === 1);
      expect(heard).toEqual([new Error('settle failed')]);
      // An unhandled rejection is reported once the microtasks of the turn it happened in have run.
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
      expect(rejections).toEqual([]);
    } finally {
      process.off('unhandledRejection', onRejection);
    }
  });
});
