import { type RedisClientLike, RedisRateLimiter } from '../../../src/redis';
import { freePort } from '../../redis/helpers/redis-server';
import type { OpenStore, StoreLimiterOptions } from '../conformance';

/** One client of a store speaking the Redis protocol, as its adapter opens it. */
export interface RedisFamilyClient {
  readonly client: RedisClientLike;
  /** Sends one raw command (an admin's: deleting keys, flushing scripts). */
  command(args: string[]): Promise<unknown>;
  close(): Promise<void>;
}

/** Deletes the keys matching ARGV[1] on the node it runs on. */
const DELETE_MATCHING = "for _, key in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', key) end return 0";

/**
 * The {@link OpenStore} of a Redis-protocol store: `connect(port)` opens a client on a port (one
 * where nothing listens, for `unreachable`, must still give a client, connecting lazily or
 * retrying). Wiping deletes the prefix's keys and flushes every cached script, so the next call
 * meets NOSCRIPT.
 */
export async function openRedisFamily(
  port: number,
  connect: (port: number) => Promise<RedisFamilyClient>,
  wipe?: (main: RedisFamilyClient) => Promise<void>,
): Promise<OpenStore> {
  const main = await connect(port);
  const opened = [main];
  return {
    limiter: (options: StoreLimiterOptions) => new RedisRateLimiter({ client: main.client, ...options }),
    unreachable: (options: StoreLimiterOptions) => {
      let limiter: RedisRateLimiter | undefined;
      // The client is opened on the first call: freePort() is asynchronous, a limiter is not.
      const ready = freePort()
        .then(connect)
        .then((dead) => {
          opened.push(dead);
          limiter = new RedisRateLimiter({ client: dead.client, ...options });
        });
      const built = async () => limiter ?? (await ready, limiter!);
      return { tryAcquire: async (key, permits) => (await built()).tryAcquire(key, permits), peek: async (key: string, permits?: number) => (await built()).peek(key, permits) };
    },
    wipe: async (prefix) => {
      if (wipe !== undefined) return wipe(main);
      await main.command(['EVAL', DELETE_MATCHING, '0', `${prefix}*`]);
      await main.command(['SCRIPT', 'FLUSH']);
    },
    close: async () => {
      await Promise.all(opened.map((client) => client.close()));
    },
  };
}
