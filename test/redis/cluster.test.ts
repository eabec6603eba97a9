import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix } from './helpers/clients';
import { type RedisCluster, startRedisCluster } from './helpers/redis-cluster';

// Keys that would break a layout spreading one decision over several keys: hash tags anywhere,
// unbalanced braces, unicode, a NUL, and a very long key.
const awkwardKeys = ['{', '}', '{}', '}{', '{user}:1', 'a{b}c{d}', '{{x}}', 'ключ-🚀-鍵', 'nul\u0000byte', 'x'.repeat(10_000), ''];

describe.skipIf(!redisPort)('Redis Cluster: one key per decision, so no CROSSSLOT whatever the key', { timeout: 60_000 }, () => {
  let cluster: RedisCluster;
  let ioredis: Cluster;
  let nodeRedis: ReturnType<typeof createCluster>;

  beforeAll(async () => {
    cluster = await startRedisCluster();
    const nodes = cluster.ports.map((port) => ({ host: '127.0.0.1', port }));
    ioredis = new Cluster(nodes);
    nodeRedis = createCluster({ rootNodes: cluster.ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
  }, 60_000);

  afterAll(async () => {
    ioredis?.disconnect();
    await nodeRedis?.destroy();
    await cluster?.stop();
  });

  test.each(algorithmNames)('%s: awkward keys work with ioredis and node-redis sharing each key', async (algorithm) => {
    const prefix = uniquePrefix('cluster');
    const viaIoredis = new RedisRateLimiter({ client: ioredis, algorithm, rule: new Rule(3, 1e12), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    const viaNodeRedis = new RedisRateLimiter({ client: nodeRedis, algorithm, rule: new Rule(3, 1e12), onStoreError: 'deny', prefix, timeoutMs: 5_000 });
    for (const key of awkwardKeys) {
      const decisions = [
        await viaIoredis.tryAcquire(key),
        await viaNodeRedis.tryAcquire(key),
        await viaIoredis.tryAcquire(key),
        await viaNodeRedis.tryAcquire(key),
      ];
      expect(decisions.map(({ allowed, remaining, degraded }) => ({ allowed, remaining, degraded }))).toEqual([
        { allowed: true, remaining: 2, degraded: undefined },
        { allowed: true, remaining: 1, degraded: undefined },
        { allowed: true, remaining: 0, degraded: undefined },
        { allowed: false, remaining: 0, degraded: undefined },
      ]);
    }
  });

  test('keys spread over the masters: the cluster really routes by key', async () => {
    const limiter = new RedisRateLimiter({ client: ioredis, algorithm: 'token-bucket', rule: Rule.perMinute(5), onStoreError: 'deny', prefix: uniquePrefix('spread') });
    for (let i = 0; i < 30; i++) expect((await limiter.tryAcquire(`user-${i}`)).degraded).toBeUndefined();
    const sizes = await Promise.all(ioredis.nodes('master').map((node) => node.dbsize()));
    expect(sizes.filter((size) => size > 0).length).toBe(3);
  });
});
