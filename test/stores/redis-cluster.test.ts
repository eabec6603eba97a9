import { Cluster } from 'ioredis';
import { redisPort } from '../redis/helpers/clients';
import { startRedisCluster } from '../redis/helpers/redis-cluster';
import { storeConformance } from './conformance';
import { openRedisFamily } from './support/redis-family';

storeConformance({
  name: 'Redis Cluster via ioredis',
  needs: 'redis-server',
  available: redisPort !== 0,
  open: async () => {
    const cluster = await startRedisCluster();
    const connect = async (port: number) => {
      const nodes = port === cluster.ports[0] ? cluster.ports : [port];
      const client = new Cluster(nodes.map((node) => ({ host: '127.0.0.1', port: node })));
      client.on('error', () => {});
      return { client, command: ([name, ...args]: string[]) => client.call(name!, ...args), close: async () => client.disconnect() };
    };
    const store = await openRedisFamily(cluster.ports[0]!, connect, async (main) => {
      const client = main.client as Cluster;
      await Promise.all(client.nodes('master').map(async (node) => {
        await node.flushall();
        await node.script('FLUSH');
      }));
    });
    return { ...store, close: async () => { await store.close(); await cluster.stop(); } };
  },
});
