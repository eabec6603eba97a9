export { RedisRateLimiter } from './redis/redis-rate-limiter';
export type { RedisRateLimiterOptions } from './redis/options';
export type { RedisAlgorithm } from './redis/scripts';
export type { GlideClientLike, RedisClientLike, RedisScriptClient } from './redis/client';
export type { StoreErrorPolicy } from './redis/outage-policy';
export { RedisTimeoutError } from './redis/timeout';
