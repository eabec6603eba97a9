import {
  FixedWindow,
  LeakyBucket,
  type RateLimitAlgorithm,
  type Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
} from '../../../src/index';
import type { RedisAlgorithm } from '../../../src/redis';

/** Every algorithm name `RedisRateLimiter` takes, with its in-memory twin. */
export const twins: Record<RedisAlgorithm, new (rule: Rule) => RateLimitAlgorithm> = {
  'token-bucket': TokenBucket,
  'leaky-bucket': LeakyBucket,
  'fixed-window': FixedWindow,
  'sliding-window-log': SlidingWindowLog,
  'sliding-window-counter': SlidingWindowCounter,
};

export const algorithmNames = Object.keys(twins) as RedisAlgorithm[];
