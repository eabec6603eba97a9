// DESIGN-24 D3: an upgrade forgives nothing. The previous version named a key by its rule
// (prefix + name? + algorithm + ':' + limit/windowMs + ':' + key); the keys it wrote are made here
// by its own scripts (test/redis/helpers/previous-version.ts runs test/redis/fixtures/previous-scripts,
// dumped at the commit before issue 24), then the new limiter, on its key's first call, decides as the in-memory
// twin that saw the whole history, counts and blocks included, and deletes the previous key.
import { test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';
import { firstCallForgivesNothing, previousCall, previousKey, upgradeCases } from './helpers/previous-version';

describe.skipIf(!redisPort)('an upgrade from the previous key layout forgives nothing', () => {
  const redis = useIoredis();

  for (const algorithm of algorithmNames) {
    test.prop([...upgradeCases], { numRuns: 20 })(
      `${algorithm}: the first call of a key reads what the previous version wrote for it (counts and blocks), then the previous key is gone`,
      (rule, steps, pause, first) => firstCallForgivesNothing(redis, redis, algorithm, rule, steps, pause, first),
    );
  }

  test.each(algorithmNames)("%s: a name and ioredis's keyPrefix are part of where the previous key is looked for", async (algorithm) => {
    const clock = new ManualClock(1_700_000_000_000);
    const prefix = uniquePrefix('upgrade-named');
    const rule = new Rule(5, 60_000);
    const { Redis: Client } = await import('ioredis');
    const prefixed = new Client({ port: redisPort, host: '127.0.0.1', keyPrefix: 'app:' });
    try {
      await previousCall(redis, algorithm, rule, `app:${prefix}orders:${algorithm}:5/60000:ключ`, clock.now(), 'acquire', 4);
      const limiter = new RedisRateLimiter({ client: prefixed, algorithm, rule, onStoreError: 'deny', clock, prefix, name: 'orders' });
      expect(await limiter.tryAcquire('ключ')).toMatchObject({ allowed: true, remaining: 0 });
      expect(await limiter.tryAcquire('ключ')).toMatchObject({ allowed: false });
      expect(await redis.exists(`app:${prefix}orders:${algorithm}:5/60000:ключ`)).toBe(0);
    } finally {
      prefixed.disconnect();
    }
  });

  // A blocked key the previous version had counted nothing on holds its block alone; the adopted
  // log's expiry was lost when that member was replaced (the key was empty for a moment).
  test('sliding-window-log: an adopted log holding only its block keeps its expiry', async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const prefix = uniquePrefix('upgrade-block');
    const rule = new Rule(5, 60_000);
    await previousCall(redis, 'sliding-window-log', rule, previousKey(prefix, 'sliding-window-log', rule, 'k'), clock.now(), 'block', 300_000);
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'sliding-window-log', rule, onStoreError: 'deny', clock, prefix });
    // Shorter than the block adopted: the block stands and nothing else is written.
    await limiter.block('k', 5_000);
    expect(await redis.pttl(`${prefix}sliding-window-log:k`)).toBeGreaterThan(0);
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false });
  });

  test.each(algorithmNames)('%s: a reset forgets the previous key too', async (algorithm) => {
    const clock = new ManualClock(1_700_000_000_000);
    const prefix = uniquePrefix('upgrade-reset');
    const rule = new Rule(5, 60_000);
    await previousCall(redis, algorithm, rule, previousKey(prefix, algorithm, rule, 'k'), clock.now(), 'acquire', 5);
    const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', clock, prefix });
    await limiter.reset('k');
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 4 });
  });
});
