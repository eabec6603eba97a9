import { Redis, type RedisOptions } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, inject } from 'vitest';
import type { RedisClientLike } from '../../../src/redis';

/** The port of the shared redis-server, or 0 when redis-server is missing (the suites skip). */
export const redisPort = inject('redisPort');

/** A prefix no other test uses, so test files can share one server without flushing it. */
export function uniquePrefix(name: string): string {
  return `test:${name}:${process.pid}:${Math.random().toString(36).slice(2)}:`;
}

/** An ioredis client that fails fast instead of retrying for long; connection errors go to a no-op handler, as a server would do. */
export function ioredisClient(port = redisPort, options: Pick<RedisOptions, 'enableOfflineQueue' | 'maxRetriesPerRequest' | 'lazyConnect'> = {}): Redis {
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, ...options });
  client.on('error', () => {});
  return client;
}

/** A connected node-redis v5 client; connection errors go to a no-op handler, as the client requires. */
export async function nodeRedisClient(port = redisPort, options: { disableOfflineQueue?: boolean } = {}) {
  const client = createClient({ socket: { port, host: '127.0.0.1', reconnectStrategy: 50 }, ...options });
  client.on('error', () => {});
  await client.connect();
  return client;
}

export type NodeRedis = Awaited<ReturnType<typeof nodeRedisClient>>;

/**
 * An ioredis client for the enclosing describe block, disconnected after it. It connects on its
 * first command, so a block skipped for want of a redis-server opens nothing.
 */
export function useIoredis(): Redis {
  const client = ioredisClient(redisPort, { lazyConnect: true });
  afterAll(() => client.disconnect());
  return client;
}

/**
 * Opens one ioredis and one node-redis client for the enclosing describe block and closes them
 * after it: suites that must hold for both clients loop over the names.
 */
export function useBothClients(): Record<'ioredis' | 'node-redis', RedisClientLike> {
  const clients = {} as Record<'ioredis' | 'node-redis', RedisClientLike>;
  let io: Redis;
  let nodeRedis: NodeRedis;
  beforeAll(async () => {
    clients.ioredis = io = ioredisClient();
    clients['node-redis'] = nodeRedis = await nodeRedisClient();
  });
  afterAll(async () => {
    io.disconnect();
    await nodeRedis.close();
  });
  return clients;
}
