// Which keys are one: a key that UTF-8 cannot carry is refused alike in memory and over Redis.
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import type { Redis } from 'ioredis';
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

describe.skipIf(!redisPort)("a limiter's identity: `name`", () => {
  const clients = useBothClients();
  const warnings: string[] = [];
  beforeEach(() => {
    warnings.length = 0;
    vi.spyOn(console, 'warn').mockImplementation((message: string) => void warnings.push(message));
  });
  afterEach(() => vi.restoreAllMocks());

  test('two limits with the same prefix, algorithm and rule keep their own counts when named; the same name shares on purpose', async () => {
    const prefix = uniquePrefix('names');
    const make = (name: string) => new RedisRateLimiter({ client: clients.ioredis, algorithm: 'sliding-window-log', rule: Rule.perMinute(5), onStoreError: 'deny', prefix, name });
    const login = make('login');
    const search = make('search');
    expect(await login.tryAcquire('alice', 5)).toMatchObject({ allowed: true, remaining: 0 });
    expect(await search.tryAcquire('alice')).toMatchObject({ allowed: true, remaining: 4 });
    // Another server's limiter for logins: the same name, the same counts.
    const loginElsewhere = make('login');
    expect(await loginElsewhere.tryAcquire('alice')).toMatchObject({ allowed: false, remaining: 0 });
    expect(await (clients.ioredis as Redis).keys(`${prefix}*`)).toEqual(expect.arrayContaining([`${prefix}login:sliding-window-log:alice`, `${prefix}search:sliding-window-log:alice`]));
    expect(warnings).toEqual([]);
  });

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    test(`${clientName}: two unnamed limiters that would share every count are reported once, naming the namespace`, () => {
      const prefix = uniquePrefix('unnamed');
      const make = () => new RedisRateLimiter({ client: clients[clientName], algorithm: 'token-bucket', rule: Rule.perMinute(5), onStoreError: 'deny', prefix });
      make();
      expect(warnings).toEqual([]);
      make();
      make();
      expect(warnings).toEqual([
        `ratekeeper: two RedisRateLimiters on one client count under "${prefix}token-bucket:" (the same prefix and algorithm: keys no longer name their rule, so limiters with different rules meet too), so they share every key's count. If they limit different things, give each its own \`name\`; to share on purpose, give both the same \`name\`.`,
      ]);
    });
  }

  test("nested namespaces, whose keys can reach each other's, are reported", async () => {
    const prefix = uniquePrefix('nested');
    const outer = new RedisRateLimiter({ client: clients.ioredis, algorithm: 'fixed-window', rule: Rule.perMinute(1), onStoreError: 'deny', prefix });
    new RedisRateLimiter({ client: clients.ioredis, algorithm: 'fixed-window', rule: Rule.perMinute(1), onStoreError: 'deny', prefix: `${prefix}fixed-window:admin:` });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("so a key chosen to match can spend the other's counts");
    // What the report is about: a key of the outer limiter that is a key of the inner one.
    expect((await outer.tryAcquire('admin:fixed-window:root')).allowed).toBe(true);
  });

  test('a name must be a non-empty, well-formed string', () => {
    const make = (name: unknown) => () => new RedisRateLimiter({ client: clients.ioredis, algorithm: 'fixed-window', rule: Rule.perSecond(1), onStoreError: 'deny', name: name as string });
    expect(make('')).toThrow(invalid('ratekeeper: `name` must be a non-empty string, got ""'));
    expect(make(7)).toThrow(invalid('ratekeeper: `name` must be a string, got 7'));
    expect(make('x\uDFFF')).toThrow(invalid('ratekeeper: `name` must be well-formed UTF-16 (no lone surrogate), got "x\\udfff"'));
  });
});
