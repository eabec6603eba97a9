// DESIGN-24 D3: an upgrade forgives nothing. The previous version named a key by its rule
// (prefix + name? + algorithm + ':' + limit/windowMs + ':' + key); the keys it wrote are made here
// by its own scripts (test/redis/fixtures/previous-scripts, dumped from src/redis/scripts.ts at the
// commit before issue 24), then the new limiter, on its key's first call, decides as the in-memory
// twin that saw the whole history, counts and blocks included, and deletes the previous key.
import { readFileSync } from 'node:fs';
import { fc, test } from '@fast-check/vitest';
import type { Redis } from 'ioredis';
import { describe, expect } from 'vitest';
import { scaledUnits } from '../../src/algorithms/token-bucket';
import { KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { type RedisAlgorithm, RedisRateLimiter } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

const previousScript = (algorithm: RedisAlgorithm) =>
  readFileSync(new URL(`./fixtures/previous-scripts/${algorithm === 'leaky-bucket' ? 'token-bucket' : algorithm}.lua`, import.meta.url), 'utf8');
const loaded = new Map<string, Promise<string>>();

/** The rule's numbers as the previous scripts took them (ARGV[1..]). */
function previousRuleArgs(algorithm: RedisAlgorithm, rule: Rule): string[] {
  if (!algorithm.endsWith('-bucket')) return [String(rule.limit), String(rule.windowMs)];
  const { perMs, perToken, limit } = scaledUnits(rule);
  return [String(perMs), String(perToken), String(limit)];
}

/** What the previous version did to one key: a decision, a charge or a block, at the caller's reading. */
async function previousCall(redis: Redis, algorithm: RedisAlgorithm, rule: Rule, key: string, now: number, op: 'acquire' | 'charge' | 'block', amount: number): Promise<unknown> {
  const args = previousRuleArgs(algorithm, rule);
  const rest = op === 'acquire' ? [String(amount), String(now)] : [op, String(now), String(amount)];
  const source = previousScript(algorithm);
  if (!loaded.has(source)) loaded.set(source, redis.script('LOAD', source) as Promise<string>);
  return redis.evalsha(await loaded.get(source)!, 1, key, ...args, ...rest);
}

const previousKey = (prefix: string, algorithm: RedisAlgorithm, rule: Rule, key: string) => `${prefix}${algorithm}:${rule.limit}/${rule.windowMs}:${key}`;

const history = fc.array(
  fc.record({
    moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5_000 }), fc.integer({ min: 0, max: 100_000 })),
    op: fc.constantFrom('acquire' as const, 'acquire' as const, 'charge' as const, 'block' as const),
    share: fc.double({ min: 0, max: 1, noNaN: true }),
  }),
  { minLength: 1, maxLength: 12 },
);

const rules = fc.record({ limit: fc.integer({ min: 1, max: 30 }), windowMs: fc.integer({ min: 1_000, max: 200_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));

describe.skipIf(!redisPort)('an upgrade from the previous key layout forgives nothing', () => {
  const redis = useIoredis();

  for (const algorithm of algorithmNames) {
    test.prop([rules, history, fc.nat({ max: 100_000 }), fc.constantFrom('peek', 'acquire', 'charge', 'reserve', 'block')], { numRuns: 20 })(
      `${algorithm}: the first call of a key reads what the previous version wrote for it (counts and blocks), then the previous key is gone`,
      async (rule, steps, pause, first) => {
        const clock = new ManualClock(1_700_000_000_000);
        const prefix = uniquePrefix('upgrade');
        const twin = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
        for (const { moveMs, op, share } of steps) {
          clock.advance(moveMs);
          const amount = op === 'block' ? 1_000 + Math.floor(share * 300_000) : op === 'charge' ? 1 + Math.floor(share * 2 * rule.limit) : 1 + Math.floor(share * (rule.limit - 1));
          await previousCall(redis, algorithm, rule, previousKey(prefix, algorithm, rule, 'k'), clock.now(), op, amount);
          if (op === 'acquire') twin.tryAcquire('k', amount);
          else if (op === 'charge') twin.charge('k', amount);
          else twin.block('k', amount);
        }
        clock.advance(pause);
        const limiter = new RedisRateLimiter({ client: redis, algorithm, rule, onStoreError: 'deny', clock, prefix, timeoutMs: 5_000 });
        const legacy = previousKey(prefix, algorithm, rule, 'k');
        const existed = await redis.exists(legacy);
        if (first === 'peek') {
          expect(await limiter.peek('k', 0)).toStrictEqual(twin.peek('k', 0));
          // A peek writes nothing: the previous key stays for the first call that spends.
          expect(await redis.exists(legacy)).toBe(existed);
        } else if (first === 'acquire') {
          expect(await limiter.tryAcquire('k')).toStrictEqual(twin.tryAcquire('k'));
        } else if (first === 'charge') {
          expect(await limiter.charge('k', 2)).toStrictEqual(twin.charge('k', 2));
        } else if (first === 'reserve') {
          expect((await limiter.reserve('k', 1)).decision).toStrictEqual(twin.reserve('k', 1).decision);
        } else {
          await limiter.block('k', 5_000);
          twin.block('k', 5_000);
        }
        if (first !== 'peek') expect(await redis.exists(legacy)).toBe(0);
        for (const permits of [0, 1, rule.limit]) expect(await limiter.peek('k', permits)).toStrictEqual(twin.peek('k', permits));
        clock.advance(pause);
        expect(await limiter.tryAcquire('k')).toStrictEqual(twin.tryAcquire('k'));
      },
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
