import { describe } from '../core/validate';
import type { LuaScript } from './scripts';

/**
 * The smallest client shape `RedisRateLimiter` needs: run a script by its SHA-1 and by its source,
 * with keys and arguments kept apart so a cluster client can route by key. `@upstash/redis` fits
 * it as it is; any other client needs two one-line functions. A rejected promise whose error
 * message contains `NOSCRIPT` makes the limiter send the script's source with `eval`.
 *
 * @example
 * ```ts
 * import { createClient } from 'redis';
 * import type { RedisScriptClient } from 'ratekeeper/redis';
 *
 * // Any client that can send a raw command fits, here node-redis's sendCommand.
 * const redis = await createClient().connect();
 * const client: RedisScriptClient = {
 *   evalsha: (sha1, keys, args) => redis.sendCommand(['EVALSHA', sha1, String(keys.length), ...keys, ...args]),
 *   eval: (script, keys, args) => redis.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args]),
 * };
 * ```
 */
export interface RedisScriptClient {
  evalsha(sha1: string, keys: string[], args: string[]): Promise<unknown>;
  eval(script: string, keys: string[], args: string[]): Promise<unknown>;
}

/**
 * An ioredis `Redis` or `Cluster` (or iovalkey), recognized by its `defineCommand` method; its
 * `evalsha` and `eval` are what is called. Typed by that method alone, so that ioredis is no
 * dependency and an inline {@link RedisScriptClient} still gets its parameter types.
 */
export interface IoredisClient {
  defineCommand(...args: never[]): unknown;
}

/**
 * A node-redis client or cluster (v4 or v5), recognized by its `evalSha` method; its `eval` runs
 * the script's source after a NOSCRIPT reply.
 */
export interface NodeRedisClient {
  evalSha(sha1: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
}

/**
 * What `client` may be: an ioredis client or cluster, a node-redis client or cluster, or any
 * object of the {@link RedisScriptClient} shape.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import type { RedisClientLike } from 'ratekeeper/redis';
 * const client: RedisClientLike = new Redis();
 * ```
 */
export type RedisClientLike = IoredisClient | NodeRedisClient | RedisScriptClient;

/** Runs a script on one key: EVALSHA, then the source with EVAL if the server answers NOSCRIPT. */
export type ScriptRunner = (script: LuaScript, key: string, args: string[]) => Promise<unknown>;

interface AnyShape {
  defineCommand?: unknown;
  evalSha?: unknown;
  evalsha?: unknown;
  eval?: unknown;
}

interface IoredisCommands {
  evalsha(sha1: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
}

interface NodeRedisCommands {
  evalSha(sha1: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
}

/**
 * Tells the three shapes apart by their methods (only ioredis has `defineCommand`, only node-redis
 * spells `evalSha`) and calls each in its own way, without building arrays it does not need.
 */
export function toScriptRunner(client: unknown): ScriptRunner {
  const c = (client !== null && typeof client === 'object' ? client : {}) as AnyShape;
  if (typeof c.evalsha === 'function' && typeof c.eval === 'function' && typeof c.defineCommand === 'function') {
    const ioredis = client as IoredisCommands;
    return (script, key, args) =>
      ioredis.evalsha(script.sha1, 1, key, ...args).catch((error: unknown) => retry(error, () => ioredis.eval(script.source, 1, key, ...args)));
  }
  if (typeof c.evalSha === 'function' && typeof c.eval === 'function') {
    const nodeRedis = client as NodeRedisCommands;
    return (script, key, args) => {
      const options = { keys: [key], arguments: args };
      return nodeRedis.evalSha(script.sha1, options).catch((error: unknown) => retry(error, () => nodeRedis.eval(script.source, options)));
    };
  }
  if (typeof c.evalsha === 'function' && typeof c.eval === 'function') {
    const adapter = client as RedisScriptClient;
    return (script, key, args) => {
      const keys = [key];
      return adapter.evalsha(script.sha1, keys, args).catch((error: unknown) => retry(error, () => adapter.eval(script.source, keys, args)));
    };
  }
  throw new TypeError(
    `ratekeeper: \`client\` must be an ioredis or node-redis client, or an object with evalsha(sha1, keys, args) and eval(script, keys, args), got ${describe(client)}`,
  );
}

/** A server that lost its script cache (restart, SCRIPT FLUSH, failover) answers NOSCRIPT: send the source, which caches it again. */
function retry(error: unknown, sendSource: () => Promise<unknown>): Promise<unknown> {
  return String((error as Error | undefined)?.message).includes('NOSCRIPT') ? sendSource() : Promise.reject(error);
}
