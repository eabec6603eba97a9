import type { StoreAlgorithm } from '../store/engine';
import type { Codec } from './sql/codec';
import { fixedWindow } from './sql/fixed-window';
import { slidingWindowCounter } from './sql/sliding-window-counter';
import { slidingWindowLog } from './sql/sliding-window-log';
import { tokenBucket } from './sql/token-bucket';

/**
 * The algorithms `PostgresRateLimiter` runs, named as over Redis and in memory: `'token-bucket'`
 * is `TokenBucket`, and so on.
 *
 * @example
 * ```ts
 * import type { PostgresAlgorithm } from 'ratekeeper/postgres';
 * const algorithm: PostgresAlgorithm = 'sliding-window-counter';
 * ```
 */
export type PostgresAlgorithm = StoreAlgorithm;

/** The codec each algorithm name decides with: the leaky bucket is the token bucket's law. */
export const codecs: Readonly<Record<PostgresAlgorithm, Codec>> = {
  'token-bucket': tokenBucket,
  'leaky-bucket': tokenBucket,
  'fixed-window': fixedWindow,
  'sliding-window-log': slidingWindowLog,
  'sliding-window-counter': slidingWindowCounter,
};

/** Each codec once, in the order `migrate` makes them. */
export const allCodecs: readonly Codec[] = [tokenBucket, fixedWindow, slidingWindowLog, slidingWindowCounter];
