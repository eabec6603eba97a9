import type { AsyncRateLimiter } from '../../../src/index';
import { ManualClock, Rule } from '../../../src/index';
import { RedisRateLimiter } from '../../../src/redis';
import { ioredisClient, uniquePrefix } from '../../redis/helpers/clients';
import { startRedisServer } from '../../redis/helpers/redis-server';

/**
 * A redis-server of the test's own, to stop mid-test, and a limiter over it of 3 a minute on a
 * frozen clock: keys starting with `allow` go to a RedisRateLimiter whose outage policy is
 * 'allow', the others to one whose policy is 'deny'.
 */
export async function stoppableRedis(name: string): Promise<{ limiter: AsyncRateLimiter; stop(): Promise<void>; close(): Promise<void> }> {
  const redis = await startRedisServer();
  // Without an offline queue, as docs/redis.md advises: a call made while disconnected fails at once.
  const client = ioredisClient(redis.port, { enableOfflineQueue: false });
  await new Promise((resolve) => client.once('ready', resolve));
  const store = (onStoreError: 'allow' | 'deny') =>
    new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(3, 60_000), onStoreError, timeoutMs: 300, clock: new ManualClock(0), prefix: uniquePrefix(name) });
  const allow = store('allow');
  const deny = store('deny');
  return {
    limiter: { tryAcquire: (key, permits) => (key.startsWith('allow') ? allow : deny).tryAcquire(key, permits) },
    stop: () => redis.stop(),
    close: async () => {
      client.disconnect();
      await redis.stop();
    },
  };
}
