export { RedisRateLimiter } from './redis/redis-rate-limiter';
export type { RedisInFlightOptions, RedisRateLimiterOptions } from './redis/options';
export type { RedisAlgorithm } from './redis/scripts';
export type { GlideClientLike, RedisClientLike, RedisScriptClient } from './redis/client';
export type { StoreErrorPolicy } from './store/outage-policy';
export type { RuleOf } from './store/store-rate-limiter';
export { RedisTimeoutError } from './redis/timeout';
