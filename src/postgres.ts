export { PostgresRateLimiter } from './postgres/postgres-rate-limiter';
export { migrate, type MigrateOptions } from './postgres/migrate';
export type { PostgresInFlightOptions, PostgresRateLimiterOptions } from './postgres/options';
export type { PostgresAlgorithm } from './postgres/plans';
export type { PgClient, PostgresClientLike, PostgresJsClient } from './postgres/client';
export type { StoreErrorPolicy } from './store/outage-policy';
export type { RuleOf } from './store/store-rate-limiter';
export { PostgresTimeoutError } from './postgres/timeout-error';
