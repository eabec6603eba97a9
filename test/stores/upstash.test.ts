import { Redis } from '@upstash/redis';
import { ioredisClient, redisPort } from '../redis/helpers/clients';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';
import { startUpstashShim } from './support/upstash-shim';

const TOKEN = 'test-token';

storeConformance({
  name: 'Upstash (@upstash/redis over its REST protocol, loopback shim)',
  needs: 'redis-server',
  available: redisPort !== 0,
  open: async () => {
    const redis = ioredisClient(redisPort);
    const shim = await startUpstashShim(redis, TOKEN);
    const store = await openRedisFamily(redisPort, async (port) => {
      // The client's defaults: base64 responses, JSON-parsed results, auto-pipelining, 5 retries.
      const client = new Redis({ url: port === redisPort ? shim.url : `http://127.0.0.1:${port}`, token: TOKEN });
      return { client, command: ([name, ...args]) => redis.call(name!, ...args), close: async () => {} };
    });
    return { ...store, close: async () => { await store.close(); await shim.close(); redis.disconnect(); } };
  },
});
