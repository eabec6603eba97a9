// Which keys are one: a key that UTF-8 cannot carry is refused alike in memory and over Redis.
import { describe, expect, test } from 'vitest';
import { KeyedRateLimiter, Rule, TokenBucket } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { redisPort, uniquePrefix, useBothClients } from './helpers/clients';

// Each of the first three used to be one Redis key (UTF-8 writes U+FFFD for a lone surrogate) but
// three keys in memory.
const loneSurrogates = ['key-\uD800', 'key-\uDBFF', '\uDC00-key', 'a\uDC00\uD800b'];
const wellFormed = ['key-\uFFFD', 'key-\u{1F680}', 'ключ', ''];
const invalid = (message: string) => Object.assign(new TypeError(message), { code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
const refusal = (key: string) => invalid(`ratekeeper: \`key\` must be well-formed UTF-16 (no lone surrogate), got ${JSON.stringify(key)}`);

describe('keys that are not well-formed UTF-16 are refused by name', () => {
  test('in memory: tryAcquire throws and acquire rejects, storing nothing', async () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(1)) });
    for (const key of loneSurrogates) {
      expect(() => limiter.tryAcquire(key)).toThrow(refusal(key));
      await expect(limiter.acquire(key)).rejects.toThrow(refusal(key));
    }
    expect(limiter.size).toBe(0);
    for (const key of wellFormed) expect(limiter.tryAcquire(key).allowed).toBe(true);
  });
});

describe.skipIf(!redisPort)('over Redis, alike', () => {
  const clients = useBothClients();

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    test(`${clientName}: a key with a lone surrogate is refused; well-formed keys stay apart`, async () => {
      const limiter = new RedisRateLimiter({ client: clients[clientName], algorithm: 'fixed-window', rule: new Rule(1, 60_000), onStoreError: 'allow', prefix: uniquePrefix('utf16') });
      for (const key of loneSurrogates) await expect(limiter.tryAcquire(key)).rejects.toThrow(refusal(key));
      for (const key of wellFormed) expect(await limiter.tryAcquire(key)).toMatchObject({ allowed: true, remaining: 0 });
    });
  }

  test('a prefix with a lone surrogate is refused by the constructor', () => {
    expect(() => new RedisRateLimiter({ client: clients.ioredis, algorithm: 'fixed-window', rule: Rule.perSecond(1), onStoreError: 'deny', prefix: 'app\uD800:' })).toThrow(
      invalid('ratekeeper: `prefix` must be well-formed UTF-16 (no lone surrogate), got "app\\ud800:"'),
    );
  });
});
