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

  it.each(algorithmNames)('%s: windows of 1 to 4 ms settle and cancel at once without a store error', async (algorithm) => {
    // Such windows have no expiry slack: a key refunded to as good as new used to be written with
    // `SET ... PX 0`, which Redis refuses. The server's clock decides (a key's expiry runs on it).
    for (const windowMs of [1, 2, 3, 4]) {
      const limiter = new RedisRateLimiter({ client, algorithm, rule: new Rule(2, windowMs), onStoreError: 'deny', prefix: uniquePrefix('tiny-window') });
      for (let i = 0; i < 20; i++) {
        const cancelled = await limiter.reserve('k');
        expect(cancelled.decision.degraded).toBeUndefined();
        await expect(cancelled.cancel()).resolves.toBeUndefined();
        const settled = await limiter.reserve('k', 2);
        if (settled.decision.allowed) await expect(settled.settle(1)).resolves.toMatchObject({ limit: 2 });
        expect((await limiter.tryAcquire('k')).degraded).toBeUndefined();
      }
    }
  });

  it.each(['token-bucket', 'sliding-window-counter'] as const)('%s: Rule(999_999_999_989, 3_600_000) grants its last permit', async (algorithm) => {
    const clock = new ManualClock(1_764_000_000_000);
    const limiter = new RedisRateLimiter({ client, algorithm, rule: new Rule(999_999_999_989, 3_600_000), onStoreError: 'deny', clock, prefix: uniquePrefix('last-permit') });
    expect(await limiter.tryAcquire('k', 999_999_999_988)).toMatchObject({ allowed: true, remaining: 1 });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false });
  });
});

describe('the outage policy over the Rule domain', () => {
  it("answers 'deny' with the exact time the permits take, for a rule past 2^53", async () => {
    const down = () => Promise.reject(new Error('connection refused'));
    const limiter = new RedisRateLimiter({ client: { evalsha: down, eval: down }, algorithm: 'token-bucket', rule: new Rule(7_065_954_778_387_700, 3_117_683_316_546), onStoreError: 'deny', clock: new ManualClock() });
    // ceil(3 777 725 702 773 917 × 3 117 683 316 546 / 7 065 954 778 387 700): one less in doubles.
    expect(await limiter.tryAcquire('k', 3_777_725_702_773_917)).toMatchObject({ allowed: false, retryAfterMs: 1_666_830_989_926, degraded: 'store-error' });
  });
});
