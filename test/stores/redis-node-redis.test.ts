import { createClient } from 'redis';
import { redisPort } from '../redis/helpers/clients';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';

storeConformance({
  name: 'Redis via node-redis',
  needs: 'redis-server',
  available: redisPort !== 0,
  numRuns: 100,
  open: () =>
    openRedisFamily(redisPort, async (port) => {
      const client = createClient({ socket: { port, host: '127.0.0.1', reconnectStrategy: 50 }, disableOfflineQueue: true });
      client.on('error', () => {});
      // Not awaited: a client of a server out of reach must still be handed out.
      const connected = client.connect().catch(() => {});
      if (port === redisPort) await connected;
      return { client, command: (args) => client.sendCommand(args), close: async () => client.destroy() };
    }),
});
