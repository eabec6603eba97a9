import { GlideClusterClient, Logger } from '@valkey/valkey-glide';
import { inject } from 'vitest';
import { startRedisCluster } from '../redis/helpers/redis-cluster';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';

storeConformance({
  name: 'Valkey Cluster via GLIDE (GlideClusterClient)',
  needs: 'valkey-server',
  available: inject('valkeyPort') !== 0,
  open: async () => {
    // GLIDE logs every server error (NoScriptError included) as a warning by default.
    Logger.setLoggerConfig('off');
    const cluster = await startRedisCluster('valkey-server');
    const store = await openRedisFamily(
      cluster.ports[0]!,
      async (port) => {
        // GLIDE fails a command after 250 ms by default, which a loaded machine reaches: the limiter's
        // timeoutMs (5 s in the suite) is the bound under test, as for the other clients.
        const client = await GlideClusterClient.createClient({ addresses: [{ host: '127.0.0.1', port }], lazyConnect: port !== cluster.ports[0], requestTimeout: 5_000 });
        return { client, command: (args) => client.customCommand(args), close: async () => client.close() };
      },
      // A custom command without keys goes to one node; these two go to every primary.
      async (main) => {
        const client = main.client as GlideClusterClient;
        await client.customCommand(['FLUSHALL'], { route: 'allPrimaries' });
        await client.customCommand(['SCRIPT', 'FLUSH'], { route: 'allPrimaries' });
      },
    );
    return { ...store, close: async () => { await store.close(); await cluster.stop(); } };
  },
});
