import { ioredisClient, redisPort } from '../redis/helpers/clients';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';

storeConformance({
  name: 'Redis via ioredis',
  needs: 'redis-server',
  available: redisPort !== 0,
  numRuns: 100,
  open: () =>
    openRedisFamily(redisPort, async (port) => {
      const client = ioredisClient(port);
      return { client, command: ([name, ...args]) => client.call(name!, ...args), close: async () => client.disconnect() };
    }),
});
