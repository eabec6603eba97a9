// The loopback Upstash shim speaks the protocol the real client expects, so that the store suite's
// Upstash run (upstash.test.ts) tests the client, not a stand-in: each part checked through the
// real @upstash/redis with its defaults.
import { Redis } from '@upstash/redis';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ioredisClient, redisPort, uniquePrefix } from '../redis/helpers/clients';
import { startUpstashShim } from './support/upstash-shim';

describe.skipIf(!redisPort)('the Upstash REST shim, through the real client', () => {
  const redis = ioredisClient(redisPort, { lazyConnect: true });
  let shim: Awaited<ReturnType<typeof startUpstashShim>>;
  let client: Redis;
  const prefix = uniquePrefix('upstash');
  beforeAll(async () => {
    shim = await startUpstashShim(redis, 'token');
    client = new Redis({ url: shim.url, token: 'token' });
  });
  afterAll(async () => {
    await shim.close();
    redis.disconnect();
  });

  test('strings cross base64-encoded (unicode and JSON-looking text intact), numbers and objects JSON-parsed', async () => {
    await client.set(`${prefix}s`, 'ключ 🚀 "quoted"');
    expect(await client.get(`${prefix}s`)).toBe('ключ 🚀 "quoted"');
    expect(await redis.get(`${prefix}s`)).toBe('ключ 🚀 "quoted"');
    await client.set(`${prefix}o`, { a: 1 });
    expect(await client.get(`${prefix}o`)).toEqual({ a: 1 });
    expect(await client.incr(`${prefix}n`)).toBe(1);
    expect(await client.eval('return {1, "two", ARGV[1]}', [], ['x'])).toEqual([1, 'two', 'x']);
  });

  test('concurrent commands go as one /pipeline (auto-pipelining), each with its own result or error', async () => {
    const results = await Promise.allSettled([client.incr(`${prefix}p`), client.evalsha('0'.repeat(40), [], []), client.incr(`${prefix}p`)]);
    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(String((results[1] as PromiseRejectedResult).reason)).toContain('NOSCRIPT');
  });

  test('/multi-exec runs a transaction', async () => {
    const results = await client.multi().set(`${prefix}m`, 'v').get(`${prefix}m`).incr(`${prefix}c`).exec();
    expect(results).toEqual(['OK', 'v', 1]);
  });

  test('a wrong token is refused', async () => {
    const intruder = new Redis({ url: shim.url, token: 'wrong', retry: false });
    await expect(intruder.get(`${prefix}s`)).rejects.toThrow();
  });
});
