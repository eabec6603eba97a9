import { GlideClient, Logger } from '@valkey/valkey-glide';
import { inject } from 'vitest';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';

const valkeyPort = inject('valkeyPort');

storeConformance({
  name: 'Valkey via GLIDE (GlideClient)',
  needs: 'valkey-server',
  available: valkeyPort !== 0,
  open: () => {
    // GLIDE logs every server error (NoScriptError included) as a warning by default.
    Logger.setLoggerConfig('off');
    return openRedisFamily(valkeyPort, async (port) => {
      const client = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port }], lazyConnect: port !== valkeyPort });
      return { client, command: (args) => client.customCommand(args), close: async () => client.close() };
    });
  },
});
