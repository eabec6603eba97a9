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
      // GLIDE fails a command after 250 ms by default, which a loaded machine reaches: the limiter's
      // timeoutMs (5 s in the suite) is the bound under test, as for the other clients.
      const client = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port }], lazyConnect: port !== valkeyPort, requestTimeout: 5_000 });
      return { client, command: (args) => client.customCommand(args), close: async () => client.close() };
    });
  },
});
