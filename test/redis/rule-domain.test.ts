import { describe, expect, it } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

// The ends of the Rule domain over Redis: every key expiry a window can ask for is one Redis takes
// (issue 17 item 15), and rules past 2^53 keep their last permit (item 17).

describe.skipIf(!redisPort)('the Rule domain over Redis', () => {
  const client = useIoredis();

  it.each(algorithmNames)('%s takes the longest window, Rule.MAX_WINDOW_MS, without a store error', async (algorithm) => {
    const limiter = new RedisRateLimiter({ client, algorithm, rule: new Rule(3, Rule.MAX_WINDOW_MS), onStoreError: 'allow', prefix: uniquePrefix('max-window') });
    const decisions = [];
    for (let i = 0; i < 4; i++) decisions.push(await limiter.tryAcquire('k'));
    expect(decisions.map((d) => [d.allowed, d.degraded])).toEqual([
      [true, undefined],
      [true, undefined],
      [true, undefined],
      [false, undefined],
    ]);
    expect(decisions[3]!.resetAfterMs).toBeGreaterThan(0);
    expect(decisions[3]!.resetAfterMs).toBeLessThanOrEqual(2 * Rule.MAX_WINDOW_MS);
  });

  it.each(['token-bucket', 'sliding-window-counter'] as const)('%s: Rule(999_999_999_989, 3_600_000) grants its last permit', async (algorithm) => {
    const clock = new ManualClock(1_764_000_000_000);
    const limiter = new RedisRateLimiter({ client, algorithm, rule: new Rule(999_999_999_989, 3_600_000), onStoreError: 'deny', clock, prefix: uniquePrefix('last-permit') });
    expect(await limiter.tryAcquire('k', 999_999_999_988)).toMatchObject({ allowed: true, remaining: 1 });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false });
  });
});
