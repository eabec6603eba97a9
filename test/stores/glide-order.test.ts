// Valkey GLIDE runs commands sent together in another order once about a hundred are in flight, so
// it is no `ordered` client: many calls on one key in one tick must still decide in the order made.
import { GlideClient, GlideClusterClient, Logger } from '@valkey/valkey-glide';
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { toScriptClient } from '../../src/redis/client';
import { startRedisCluster, type RedisCluster } from '../redis/helpers/redis-cluster';

const valkeyPort = inject('valkeyPort');
/** Calls on one key in one tick, and fresh keys given them: enough that GLIDE, sent them all at once, reordered some in every run measured. */
const CALLS = 2000;
const KEYS = 8;

async function decidesInOrder(client: GlideClient | GlideClusterClient, prefix: string): Promise<void> {
  const clock = new ManualClock(1_700_000_000_000);
  const rule = new Rule(3 * (CALLS / 2), 3_600_000);
  const limiter = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule, clock, onStoreError: 'deny', prefix, timeoutMs: 20_000 });
  const twin = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock });
  // Permits 1 to 3, so that two calls swapped read a different remaining.
  const permits = Array.from({ length: CALLS }, (_, i) => 1 + ((i * 7) % 3));
  for (let key = 0; key < KEYS; key++) {
    const decisions = await Promise.all(permits.map((n) => limiter.tryAcquire(`hot-${key}`, n)));
    const expected = permits.map((n) => twin.tryAcquire(`hot-${key}`, n));
    expect(decisions.map(({ allowed, remaining, degraded }) => ({ allowed, remaining, degraded })), `key ${key}`).toEqual(
      expected.map(({ allowed, remaining }) => ({ allowed, remaining, degraded: undefined })),
    );
    expect(expected.some(({ allowed }) => !allowed)).toBe(true);
  }
}

describe.skipIf(valkeyPort === 0)('Valkey GLIDE: calls on one key decide in the order made', () => {
  let cluster: RedisCluster;
  let standalone: GlideClient;
  let clustered: GlideClusterClient;

  beforeAll(async () => {
    // GLIDE logs every server error (NoScriptError included) as a warning by default.
    Logger.setLoggerConfig('off');
    cluster = await startRedisCluster('valkey-server');
    standalone = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port: valkeyPort }], requestTimeout: 20_000 });
    clustered = await GlideClusterClient.createClient({ addresses: [{ host: '127.0.0.1', port: cluster.ports[0]! }], requestTimeout: 20_000 });
  }, 60_000);

  afterAll(async () => {
    standalone?.close();
    clustered?.close();
    await cluster?.stop();
  });

  test('a GLIDE client is not taken for one that keeps the order of commands sent together', () => {
    expect(toScriptClient(standalone).ordered).not.toBe(true);
    expect(toScriptClient(clustered).ordered).not.toBe(true);
  });

  test(`${CALLS} calls on one key in one tick over a GlideClient decide as the same calls in memory, in order`, async () => {
    await decidesInOrder(standalone, `glide-order-${process.pid}-${Date.now()}:`);
  });

  test(`${CALLS} calls on one key in one tick over a GlideClusterClient decide as the same calls in memory, in order`, async () => {
    await decidesInOrder(clustered, `glide-order-${process.pid}-${Date.now()}:`);
  });
});
