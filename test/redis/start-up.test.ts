// src/redis/readiness.ts through RedisRateLimiter (issue 23, the start-up bullet): the README and
// docs/redis.md advise a client without an offline queue, which fails every command made before its
// 'ready'. A fresh process's first calls must still be decided by Redis, not by the outage policy.
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { describe, expect, test } from 'vitest';
import { Rule } from '../../src/index';
import { RedisRateLimiter, type RedisClientLike } from '../../src/redis';
import { ioredisClient, redisPort, uniquePrefix } from './helpers/clients';

/** A client made now and not yet ready, as in a process that has just started, and how to close it. */
function fresh(name: 'ioredis' | 'node-redis'): { client: RedisClientLike; close: () => Promise<unknown> } {
  if (name === 'ioredis') {
    const client = new Redis({ port: redisPort, host: '127.0.0.1', enableOfflineQueue: false });
    client.on('error', () => {});
    expect(client.status).toBe('connecting');
    return { client, close: async () => client.disconnect() };
  }
  const client = createClient({ socket: { port: redisPort, host: '127.0.0.1' }, disableOfflineQueue: true });
  client.on('error', () => {});
  const connected = client.connect();
  expect(client.isReady).toBe(false);
  return { client, close: async () => (await connected).destroy() };
}

describe.skipIf(!redisPort)('the first calls of a fresh process, made before the client is ready', () => {
  // A bound no connection on loopback comes near, however busy the machine: what is checked is who
  // decided, not how fast.
  const timeoutMs = 20_000;

  test.each(['ioredis', 'node-redis'] as const)("%s without an offline queue, under 'deny': Redis decides every call, in the order made", { timeout: 30_000 }, async (name) => {
    const { client, close } = fresh(name);
    try {
      const errors: unknown[] = [];
      const options = { client, rule: new Rule(3, 60_000), onStoreError: 'deny', prefix: uniquePrefix('start-up'), timeoutMs, onError: (error: unknown) => errors.push(error) } as const;
      const limiter = new RedisRateLimiter({ ...options, algorithm: 'token-bucket' });
      const unbatched = new RedisRateLimiter({ ...options, algorithm: 'fixed-window', batch: false });
      const [first, second, alone, state, reservation] = await Promise.all([
        limiter.tryAcquire('k'),
        limiter.tryAcquire('k', 2),
        unbatched.tryAcquire('k'),
        limiter.peek('other', 0),
        limiter.reserve('r', 3),
      ]);
      expect(first).toStrictEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 20_000 });
      expect(second).toStrictEqual({ allowed: true, limit: 3, remaining: 0, retryAfterMs: 0, resetAfterMs: 60_000 });
      expect(alone).toMatchObject({ allowed: true, remaining: 2 });
      expect(state).toStrictEqual({ allowed: true, limit: 3, remaining: 3, retryAfterMs: 0, resetAfterMs: 0 });
      expect(reservation.decision).toMatchObject({ allowed: true, remaining: 0 });
      expect(errors).toEqual([]);
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false });
    } finally {
      await close();
    }
  });

  test('many limiters on one fresh client wait on one set of listeners (no MaxListenersExceededWarning)', { timeout: 30_000 }, async () => {
    const { client, close } = fresh('ioredis');
    const emitter = client as Redis;
    try {
      const before = ['ready', 'error', 'close', 'end'].map((event) => emitter.listenerCount(event));
      const limiters = Array.from({ length: 20 }, (_, i) => new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: new Rule(3, 60_000), onStoreError: 'deny', prefix: uniquePrefix(`many-${i}`), timeoutMs }));
      const decisions = Promise.all(limiters.map((limiter) => limiter.tryAcquire('k')));
      await Promise.resolve(); // the calls are sent in a microtask, where they find the attempt
      expect(['ready', 'error', 'close', 'end'].map((event) => emitter.listenerCount(event))).toEqual(before.map((count) => count + 1));
      for (const decision of await decisions) expect(decision).toStrictEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
      expect(['ready', 'error', 'close', 'end'].map((event) => emitter.listenerCount(event))).toEqual(before);
    } finally {
      await close();
    }
  });

  test('a client whose first attempt fails is not waited for beyond it: the policy answers, marked store-error', async () => {
    const client = new Redis({ port: 1, host: '127.0.0.1', enableOfflineQueue: false });
    client.on('error', () => {});
    try {
      const limiter = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(3, 60_000), onStoreError: 'deny', prefix: uniquePrefix('start-up'), timeoutMs: 2 ** 31 - 1 });
      expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, degraded: 'store-error' });
      expect(await limiter.peek('k', 0)).toMatchObject({ allowed: true, remaining: 0, degraded: 'store-error' });
    } finally {
      client.disconnect();
    }
  });

  test('a key operation its timeout answered while the first connection was under way is not sent once it is up', async () => {
    // A loopback proxy that accepts the client's connection and passes nothing on until released:
    // the first connection stays under way for as long as the test likes, so every bound passes.
    const sockets: Socket[] = [];
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const proxy = createServer((socket) => {
      socket.pause();
      socket.on('error', () => {});
      sockets.push(socket);
      void released.then(() => {
        const upstream = connect(redisPort, '127.0.0.1');
        upstream.on('error', () => {});
        sockets.push(upstream);
        socket.pipe(upstream).pipe(socket);
        socket.resume();
      });
    });
    proxy.listen(0, '127.0.0.1');
    await once(proxy, 'listening');
    const client = new Redis({ port: (proxy.address() as AddressInfo).port, host: '127.0.0.1', enableOfflineQueue: false });
    client.on('error', () => {});
    const direct = ioredisClient();
    try {
      const options = { algorithm: 'fixed-window', rule: new Rule(3, 60_000), onStoreError: 'deny', prefix: uniquePrefix('start-up-operations') } as const;
      const limiter = new RedisRateLimiter({ ...options, client, timeoutMs: 1 });
      await expect(limiter.charge('charged', 3)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_STORE_TIMEOUT' });
      await expect(limiter.block('blocked', 60_000)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_STORE_TIMEOUT' });
      expect((await limiter.reserve('reserved', 3)).decision).toMatchObject({ allowed: false, degraded: 'store-timeout' });
      release();
      await once(client, 'ready');
      // Anything sent late on this connection is ahead of this round trip.
      await client.ping();
      const observer = new RedisRateLimiter({ ...options, client: direct });
      for (const key of ['charged', 'blocked', 'reserved']) expect(await observer.peek(key, 0)).toStrictEqual({ allowed: true, limit: 3, remaining: 3, retryAfterMs: 0, resetAfterMs: 0 });
    } finally {
      client.disconnect();
      direct.disconnect();
      for (const socket of sockets) socket.destroy();
      proxy.close();
    }
  });
});
