import { typeError } from '../core/errors';
import { describe } from '../core/validate';
import type { LuaScript } from './scripts';

/**
 * The smallest client shape `RedisRateLimiter` needs: run a script by its SHA-1 and by its source,
 * with keys and arguments kept apart so a cluster client can route by key. `@upstash/redis` fits
 * it as it is; any other client needs two one-line functions. A rejected promise whose error
 * message contains `NOSCRIPT` (or GLIDE's `NoScriptError`) makes the limiter send the script's
 * source with `eval`.
 *
 * @example
 * ```ts
 * import { createClient } from 'redis';
 * import type { RedisScriptClient } from 'ratekeeper/redis';
 *
 * // Any client that can send a raw command fits, here node-redis's sendCommand (one connection,
 * // so its script calls run in the order sent: `ordered`).
 * const redis = await createClient().connect();
 * const client: RedisScriptClient = {
 *   evalsha: (sha1, keys, args) => redis.sendCommand(['EVALSHA', sha1, String(keys.length), ...keys, ...args]),
 *   eval: (script, keys, args) => redis.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args]),
 *   ordered: true,
 * };
 * ```
 */
export interface RedisScriptClient {
  evalsha(sha1: string, keys: string[], args: string[]): Promise<unknown>;
  eval(script: string, keys: string[], args: string[]): Promise<unknown>;
  /**
   * True when script calls run in the order they were sent, however many are in flight (one
   * pipelined connection per server, as ioredis and node-redis keep): a full batch then goes at
   * once, beside the script call in flight. Left out (an HTTP client such as `@upstash/redis`, or
   * Valkey GLIDE, may run commands sent together in another order), it waits for that call to come
   * back, and a key has at most one script call in flight, so that calls on one key still run in
   * the order made.
   */
  readonly ordered?: boolean | undefined;
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
 * A Valkey GLIDE `GlideClient` or `GlideClusterClient` (`@valkey/valkey-glide`), recognized by its
 * `customCommand` and `invokeScript` methods. Scripts go as raw `EVALSHA`/`EVAL` through
 * `customCommand`, which GLIDE routes by key on a cluster, so no GLIDE `Script` object is created
 * and none needs releasing. GLIDE's NOSCRIPT error reads `NoScriptError`, which is recognized.
 */
export interface GlideClientLike {
  customCommand(args: string[]): Promise<unknown>;
  invokeScript(...args: never[]): unknown;
}

/**
 * What `client` may be: an ioredis client or cluster (or iovalkey), a node-redis client or
 * cluster, a Valkey GLIDE client or cluster client, or any object of the {@link RedisScriptClient}
 * shape (`@upstash/redis` is one as it is).
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import type { RedisClientLike } from 'ratekeeper/redis';
 * const client: RedisClientLike = new Redis();
 * ```
 */
export type RedisClientLike = IoredisClient | NodeRedisClient | GlideClientLike | RedisScriptClient;

interface AnyShape {
  defineCommand?: unknown;
  options?: { keyPrefix?: unknown };
  evalSha?: unknown;
  evalsha?: unknown;
  eval?: unknown;
  isCluster?: unknown;
  getSlotMaster?: unknown;
  status?: unknown;
  isOpen?: unknown;
  customCommand?: unknown;
  invokeScript?: unknown;
  invokeScriptWithRoute?: unknown;
}

interface IoredisCommands {
  evalsha(sha1: string, numKeys: number, keys: string[], args: string[]): Promise<unknown>;
  eval(script: string, numKeys: number, keys: string[], args: string[]): Promise<unknown>;
}

interface NodeRedisCommands extends NodeRedisClient {
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
}

/**
 * Brings the four shapes to the adapter's, telling them apart by their methods (only ioredis has
 * `defineCommand`, only node-redis spells `evalSha`, only GLIDE has `invokeScript`), without
 * copying the arrays where the client takes them as they are: ioredis flattens array arguments itself.
 */
export function toScriptClient(client: unknown): RedisScriptClient {
  const c = shape(client);
  if (typeof c.evalsha === 'function' && typeof c.eval === 'function' && typeof c.defineCommand === 'function') {
    const ioredis = client as IoredisCommands;
    return {
      evalsha: (sha1, keys, args) => ioredis.evalsha(sha1, keys.length, keys, args),
      eval: (script, keys, args) => ioredis.eval(script, keys.length, keys, args),
      ordered: true,
    };
  }
  if (typeof c.evalSha === 'function' && typeof c.eval === 'function') {
    const nodeRedis = client as NodeRedisCommands;
    return {
      evalsha: (sha1, keys, args) => nodeRedis.evalSha(sha1, { keys, arguments: args }),
      eval: (script, keys, args) => nodeRedis.eval(script, { keys, arguments: args }),
      ordered: true,
    };
  }
  if (typeof c.customCommand === 'function' && typeof c.invokeScript === 'function') {
    const glide = client as GlideClientLike;
    return {
      evalsha: (sha1, keys, args) => glide.customCommand(['EVALSHA', sha1, String(keys.length), ...keys, ...args]),
      eval: (script, keys, args) => glide.customCommand(['EVAL', script, String(keys.length), ...keys, ...args]),
      // GLIDE runs commands sent together in another order once about a hundred are in flight
      // (measured: 200 `EVAL`s on one key at once, reordered in 36 of 50 rounds on a cluster).
      ordered: false,
    };
  }
  if (typeof c.evalsha === 'function' && typeof c.eval === 'function') return client as RedisScriptClient;
  throw typeError(
    `ratekeeper: \`client\` must be an ioredis, node-redis or Valkey GLIDE client, or an object with evalsha(sha1, keys, args) and eval(script, keys, args), got ${describe(client)}`,
  );
}

/** A lost script: `NOSCRIPT` from Redis and Valkey (also inside Upstash's "Command failed: NOSCRIPT ..."), `NoScriptError` from GLIDE. */
const NO_SCRIPT = /NOSCRIPT|NoScriptError/;

/**
 * Runs `script` on `keys` with EVALSHA and hands the reply or the error to the callbacks. A server
 * that lost its script cache (restart, SCRIPT FLUSH, failover) answers NOSCRIPT: then `reloading`
 * is told, and the source goes with EVAL, which caches it again. Callbacks, not a chain of
 * promises, keep a call to the one promise the client makes.
 */
export function runScript(
  client: RedisScriptClient,
  script: LuaScript,
  keys: string[],
  args: string[],
  done: (reply: unknown) => void,
  failed: (error: unknown) => void,
  reloading: () => void,
): void {
  send(() => client.evalsha(script.sha1, keys, args), done, (error) => {
    if (!NO_SCRIPT.test(String((error as Error | undefined)?.message))) return failed(error);
    reloading();
    send(() => client.eval(script.source, keys, args), done, failed);
  });
}

function send(command: () => Promise<unknown>, done: (reply: unknown) => void, failed: (error: unknown) => void): void {
  try {
    command().then(done, failed);
  } catch (error) {
    // An adapter that throws instead of rejecting fails the same way.
    failed(error);
  }
}

/**
 * True for a Redis Cluster client: an ioredis `Cluster` (`isCluster`), a node-redis cluster (the
 * only shape with `getSlotMaster`) or a GLIDE `GlideClusterClient` (the only one with
 * `invokeScriptWithRoute`). One script may only touch keys of one hash slot there.
 */
export function isClusterClient(client: unknown): boolean {
  const c = shape(client);
  return c.isCluster === true || typeof c.getSlotMaster === 'function' || typeof c.invokeScriptWithRoute === 'function';
}

/**
 * True once the client is closed for good, so that no command will ever succeed again: ioredis after
 * `quit()` or `disconnect()` (`status` 'end'), node-redis after `quit()`, `close()` or `destroy()`
 * (`isOpen` false; it never reconnects on its own). An adapter object is never known to be closed.
 */
export function isClientClosed(client: unknown): boolean {
  const c = shape(client);
  return c.status === 'end' || c.isOpen === false;
}

/**
 * The prefix an ioredis client (or cluster) adds to every key it sends (its `keyPrefix` option),
 * or '' for other clients. A cluster places a key by the key the server sees, prefix included.
 * @throws TypeError for a prefix that is not a string (a Buffer), whose slot could not be computed.
 */
export function clientKeyPrefix(client: unknown): string {
  const c = shape(client);
  if (typeof c.defineCommand !== 'function') return '';
  const keyPrefix = c.options?.keyPrefix ?? '';
  if (typeof keyPrefix !== 'string') {
    throw typeError(`ratekeeper: the client's \`keyPrefix\` must be a string to compute hash slots, got ${describe(keyPrefix)}; use RedisRateLimiter's \`prefix\` instead`);
  }
  return keyPrefix;
}

function shape(client: unknown): AnyShape {
  return (client !== null && typeof client === 'object' ? client : {}) as AnyShape;
}
