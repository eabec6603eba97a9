import Valkey from 'iovalkey';
import { inject } from 'vitest';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';

const valkeyPort = inject('valkeyPort');

storeConformance({
  name: 'Valkey via iovalkey',
  needs: 'valkey-server',
  available: valkeyPort !== 0,
  open: () =>
    openRedisFamily(valkeyPort, async (port) => {
      const client = new Valkey({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
      client.on('error', () => {});
      return { client, command: ([name, ...args]) => client.call(name!, ...args), close: async () => client.disconnect() };
    }),
});
