// Redis faults not covered by test/redis/outage-policy.test.ts: a network slower than the timeout
// (a delaying TCP proxy on loopback), and a run of every fault in turn while callers keep calling.
// A store whose data is gone (keys and cached scripts) is in the store conformance suite
// (test/stores/conformance.ts), for every store. Throughout: no
// unhandled rejection, every call is answered (by the policy, marked store-timeout, once timeoutMs has
// passed, never sooner; a generous bound catches a hang), and the same limiter and client recover
// without the app being restarted.
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { KeyedRateLimiter, Rule, TokenBucket } from '../../src/index';
import { type RedisClientLike, RedisRateLimiter, type StoreErrorPolicy } from '../../src/redis';
import { ioredisClient, nodeRedisClient, redisPort, uniquePrefix } from '../redis/helpers/clients';
import { startRedisServer } from '../redis/helpers/redis-server';
import { HANG_MS } from '../support/hang';
import { recovered, timed } from '../support/recovery';

const TIMEOUT_MS = 150;

/** A TCP proxy on loopback that holds every chunk, in both directions, `delayMs` before passing it on, in order. */
async function delayingProxy(targetPort: number) {
  let delayMs = 0;
  const sockets = new Set<Socket>();
  const relay = (from: Socket, to: Socket) => {
    let tail = Promise.resolve();
    from.on('data', (chunk) => {
      const due = performance.now() + delayMs;
      tail = tail.then(async () => {
        const wait = due - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        if (!to.destroyed) to.write(chunk);
      });
    });
    from.on('close', () => to.destroy());
    from.on('error', () => to.destroy());
  };
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    }
    relay(client, upstream);
    relay(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    setDelay: (ms: number) => {
      delayMs = ms;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const unhandled: unknown[] = [];
const collect = (reason: unknown) => unhandled.push(reason);

describe.skipIf(!redisPort)('Redis faults: the policy answers in time, nothing is left unhandled, and service resumes in place', () => {
  beforeAll(() => {
    process.on('unhandledRejection', collect);
  });
  afterEach(async () => {
    // Late replies and late failures land after their callers were answered: give them time to.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(unhandled).toEqual([]);
  });
  afterAll(() => {
    process.off('unhandledRejection', collect);
  });

  test('a network slower than the timeout: each call gets the policy within timeoutMs, late replies are dropped, and the limit still holds', { timeout: 20_000 }, async () => {
    const proxy = await delayingProxy(redisPort);
    const io = ioredisClient(proxy.port);
    const nodeRedis = await nodeRedisClient(proxy.port);
    const clients: [string, RedisClientLike][] = [
      ['ioredis', io],
      ['node-redis', nodeRedis],
    ];
    try {
      for (const [clientName, client] of clients) {
        // While Redis is out of reach, the fallback holds this server to 4 of the 8 calls.
        const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(4, 60_000)) });
        const policies: [string, StoreErrorPolicy, number][] = [
          ['deny', 'deny', 0],
          ['allow', 'allow', 8],
          ['a fallback limiter', fallback, 4],
        ];
        for (const [policyName, onStoreError, allowedWhileSlow] of policies) {
          proxy.setDelay(0);
          const options = { client, algorithm: 'sliding-window-log', rule: new Rule(3, 60_000), onStoreError, prefix: uniquePrefix(`slow-${clientName}`), name: 'shared-on-purpose' } as const;
          const limiter = new RedisRateLimiter({ ...options, timeoutMs: TIMEOUT_MS });
          const key = `${policyName}`;
          // The call before the slowdown must reach Redis whatever the machine's load: through a
          // twin limiter (the same keys) with room to spare.
          expect(await new RedisRateLimiter({ ...options, timeoutMs: HANG_MS }).tryAcquire(key)).toMatchObject({ allowed: true, remaining: 2 });
          proxy.setDelay(TIMEOUT_MS * 3);
          // Many callers at once: every one is answered by the policy, none waits for the slow network.
          const slow = await Promise.all(Array.from({ length: 8 }, () => timed(limiter, key)));
          expect(slow.filter(({ decision }) => decision.allowed)).toHaveLength(allowedWhileSlow);
          for (const { decision, elapsed } of slow) {
            expect(decision.degraded).toBe('store-timeout');
            expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
            expect(elapsed).toBeLessThan(HANG_MS);
          }
          proxy.setDelay(0);
          // Redis ran the eight late calls when they arrived: they spent what was left, never more.
          const after = await recovered(limiter, key, 5_000);
          expect(after).toMatchObject({ allowed: false, remaining: 0 });
          expect(after.degraded).toBeUndefined();
        }
      }
    } finally {
      io.disconnect();
      await nodeRedis.destroy();
      await proxy.close();
    }
  });

  test('every fault in turn while callers keep calling: frozen, thawed, killed, restarted empty; no call hangs', { timeout: 30_000 }, async () => {
    let server = await startRedisServer();
    const { port } = server;
    const io = ioredisClient(port, { enableOfflineQueue: false });
    const nodeRedis = await nodeRedisClient(port, { disableOfflineQueue: true });
    const limiters = [io, nodeRedis].map(
      (client, i) => new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError: 'deny', timeoutMs: TIMEOUT_MS, prefix: uniquePrefix(`faults-${i}`) }),
    );
    let calling = true;
    let calls = 0;
    let slowest = 0;
    const degraded = new Set<string>();
    const caller = async (limiter: RedisRateLimiter) => {
      while (calling) {
        const { decision, elapsed } = await timed(limiter, 'k');
        calls++;
        slowest = Math.max(slowest, elapsed);
        if (decision.degraded !== undefined) degraded.add(decision.degraded);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    };
    const callers = limiters.flatMap((limiter) => [caller(limiter), caller(limiter)]);
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    try {
      await pause(200);
      server.process.kill('SIGSTOP');
      await pause(500);
      server.process.kill('SIGCONT');
      await pause(300);
      await server.stop();
      await pause(500);
      server = await startRedisServer({ port });
      // Recovery in place: the same limiters and clients, no restart of the app.
      for (const limiter of limiters) expect((await recovered(limiter, 'fresh', 10_000)).degraded).toBeUndefined();
    } finally {
      calling = false;
      await Promise.all(callers);
      io.disconnect();
      await nodeRedis.destroy();
      await server.stop();
    }
    // Every caller kept calling through the faults (how often depends on the machine's speed, so only that).
    expect(calls).toBeGreaterThan(callers.length);
    expect(slowest).toBeLessThan(HANG_MS);
    expect([...degraded].sort()).toEqual(expect.arrayContaining(['store-timeout']));
  });
});
