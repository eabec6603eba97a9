export { SharedKeyedRateLimiter } from './shared/shared-keyed-rate-limiter';
export type { SharedKeyedRateLimiterOptions, SharedAttachOptions } from './shared/shared-keyed-rate-limiter';
export type { SharedAlgorithm } from './shared/layout';
