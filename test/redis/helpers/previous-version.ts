// What the previous version (before issue 24) wrote, made by its own scripts
// (test/redis/fixtures/previous-scripts, dumped from src/redis/scripts.ts at the commit before
// issue 24), for the upgrade tests on a server (upgrade.test.ts) and on a cluster (cluster.test.ts).
import { readFileSync } from 'node:fs';
import { fc } from '@fast-check/vitest';
import type { Cluster, Redis } from 'ioredis';
import { expect } from 'vitest';
import { scaledUnits } from '../../../src/algorithms/token-bucket';
import { KeyedRateLimiter, ManualClock, Rule } from '../../../src/index';
import { type RedisAlgorithm, type RedisClientLike, RedisRateLimiter } from '../../../src/redis';
import { twins } from './algorithms';
import { uniquePrefix } from './clients';

const previousScript = (algorithm: RedisAlgorithm) =>
  readFileSync(new URL(`../fixtures/previous-scripts/${algorithm === 'leaky-bucket' ? 'token-bucket' : algorithm}.lua`, import.meta.url), 'utf8');

/** The rule's numbers as the previous scripts took them (ARGV[1..]). */
function previousRuleArgs(algorithm: RedisAlgorithm, rule: Rule): string[] {
  if (!algorithm.endsWith('-bucket')) return [String(rule.limit), String(rule.windowMs)];
  const { perMs, perToken, limit } = scaledUnits(rule);
  return [String(perMs), String(perToken), String(limit)];
}

export type PreviousOperation = 'acquire' | 'charge' | 'block';

/**
 * What the previous version did to one key: a decision, a charge or a block, at the caller's
 * reading. Sent with EVAL, which a cluster client routes by the key (a script loaded on one node
 * is unknown to the others).
 */
export function previousCall(redis: Redis | Cluster, algorithm: RedisAlgorithm, rule: Rule, key: string, now: number, op: PreviousOperation, amount: number): Promise<unknown> {
  const rest = op === 'acquire' ? [String(amount), String(now)] : [op, String(now), String(amount)];
  return redis.eval(previousScript(algorithm), 1, key, ...previousRuleArgs(algorithm, rule), ...rest);
}

/** The previous version's name of `key` (DESIGN-24 D1). */
export const previousKey = (prefix: string, algorithm: RedisAlgorithm, rule: Rule, key: string): string => `${prefix}${algorithm}:${rule.limit}/${rule.windowMs}:${key}`;

const rules = fc.record({ limit: fc.integer({ min: 1, max: 30 }), windowMs: fc.integer({ min: 1_000, max: 200_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));

/** A history of the previous version's calls on one key: how far the clock moves before each, which call, its size. */
export const previousHistory = fc.array(
  fc.record({
    moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5_000 }), fc.integer({ min: 0, max: 100_000 })),
    op: fc.constantFrom('acquire' as const, 'acquire' as const, 'charge' as const, 'block' as const),
    share: fc.double({ min: 0, max: 1, noNaN: true }),
  }),
  { minLength: 1, maxLength: 12 },
);

/**
 * The cases of {@link firstCallForgivesNothing}: a rule, the previous version's history, a pause,
 * and the new version's first call.
 */
export const upgradeCases = [rules, previousHistory, fc.nat({ max: 100_000 }), fc.constantFrom('peek', 'acquire', 'charge', 'reserve', 'block')] as const;

/**
 * The previous version plays `steps` on a key (written through `redis`), then after `pause` the
 * new limiter (over `client`) makes its `first` call: it and every call after decide as the
 * in-memory twin that saw the whole history, counts and blocks included. A peek writes nothing;
 * any other first call deletes the previous key. On a cluster (`cluster`), where that delete is a
 * command of its own, the key written expires no earlier than the previous one would have: were
 * the delete lost, the previous key is never adopted twice.
 */
export async function firstCallForgivesNothing(
  redis: Redis | Cluster,
  client: RedisClientLike,
  algorithm: RedisAlgorithm,
  rule: Rule,
  steps: readonly { moveMs: number; op: PreviousOperation; share: number }[],
  pause: number,
  first: 'peek' | 'acquire' | 'charge' | 'reserve' | 'block',
  cluster = false,
): Promise<void> {
  const clock = new ManualClock(1_700_000_000_000);
  const prefix = uniquePrefix('upgrade');
  const twin = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
  const legacy = previousKey(prefix, algorithm, rule, 'k');
  await playPrevious(redis, algorithm, rule, legacy, twin, clock, steps);
  clock.advance(pause);
  const limiter = new RedisRateLimiter({ client, algorithm, rule, onStoreError: 'deny', clock, prefix, timeoutMs: 5_000 });
  const expiry = (key: string) => redis.call('PEXPIRETIME', key) as Promise<number>;
  const expired = await expiry(legacy);
  if (first === 'peek') {
    expect(await limiter.peek('k', 0)).toStrictEqual(twin.peek('k', 0));
    // A peek writes nothing: the previous key stays for the first call that spends.
    expect(await expiry(legacy)).toBe(expired);
    expect(await redis.exists(`${prefix}${algorithm}:k`)).toBe(0);
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
  if (first !== 'peek') {
    expect(await redis.exists(legacy)).toBe(0);
    if (cluster && expired > 0) expect(await expiry(`${prefix}${algorithm}:k`)).toBeGreaterThanOrEqual(expired);
  }
  for (const permits of [0, 1, rule.limit]) expect(await limiter.peek('k', permits)).toStrictEqual(twin.peek('k', permits));
  clock.advance(pause);
  expect(await limiter.tryAcquire('k')).toStrictEqual(twin.tryAcquire('k'));
}

/**
 * Plays `steps` through the previous version's script on `key` and on the in-memory twin (its
 * key 'k'), moving `clock` before each.
 */
export async function playPrevious(
  redis: Redis | Cluster,
  algorithm: RedisAlgorithm,
  rule: Rule,
  key: string,
  twin: KeyedRateLimiter,
  clock: { advance(ms: number): void; now(): number },
  steps: readonly { moveMs: number; op: PreviousOperation; share: number }[],
): Promise<void> {
  for (const { moveMs, op, share } of steps) {
    clock.advance(moveMs);
    const amount = op === 'block' ? 1_000 + Math.floor(share * 300_000) : op === 'charge' ? 1 + Math.floor(share * 2 * rule.limit) : 1 + Math.floor(share * (rule.limit - 1));
    await previousCall(redis, algorithm, rule, key, clock.now(), op, amount);
    if (op === 'acquire') twin.tryAcquire('k', amount);
    else if (op === 'charge') twin.charge('k', amount);
    else twin.block('k', amount);
  }
}
