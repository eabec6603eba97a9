// Child process: Redis decisions per second with 64 in flight over one ioredis client, against a
// redis-server it spawns on a random loopback port and stops: the floor of a bare EVALSHA
// (INCRBY + PEXPIRE), rate-limiter-flexible's RateLimiterRedis, and ratekeeper's RedisRateLimiter
// per algorithm: as configured by default and with `batch: false` (one script call per decision,
// call for call comparable with the floor). Its 64 loops await one decision after another, so the
// replies that arrive in one socket read start their next calls in the same tick: the friendliest
// case for batching. redis-arrivals.ts measures calls as requests make them. Run by run.ts.
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import type { Rule } from '../src/index';
import { ALGORITHM_NAMES, MANY_RULE } from './algorithms';
import { sendToParent } from './child';
import { spawnRedis } from './redis-server';
import { manyKeysWorkload } from './workloads';

export const IN_FLIGHT = 64;
export const REDIS_KEYS = 10_000;
export const ROUNDS = 5;
export const SAMPLE_MS = 300;
const WARMUP_MS = 300;

/** One decision over Redis; resolves when the answer is back. */
export interface RedisContender {
  readonly name: string;
  decide(key: string): Promise<unknown>;
}

export interface RedisResult {
  readonly redisVersion: string;
  /** Decisions per second per round, per contender. */
  readonly samples: Record<string, number[]>;
  /** Redis CPU per decision (µs, from INFO commandstats: usec of EVALSHA over decisions, as one call may carry many), per round. */
  readonly serverUs: Record<string, number[]>;
  /** This Node process's CPU per decision (µs, process.cpuUsage), per round. */
  readonly clientUs: Record<string, number[]>;
  /** Why ratekeeper's rows are missing, when they are. */
  readonly ratekeeperMissing?: string;
}

export const EVALSHA_FLOOR = 'floor: bare EVALSHA (INCRBY + PEXPIRE)';
export const RLF_REDIS = 'rate-limiter-flexible RateLimiterRedis';
export const ratekeeperRedisName = (algorithm: string): string => `ratekeeper RedisRateLimiter ${algorithm}`;

const FLOOR_SCRIPT = "local v = redis.call('INCRBY', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return v";

/** The floor: a bare EVALSHA of INCRBY + PEXPIRE per decision. */
export async function evalshaFloor(client: Redis, rule: Rule): Promise<RedisContender> {
  const sha = (await client.script('LOAD', FLOOR_SCRIPT)) as string;
  const ttl = String(rule.windowMs);
  return { name: EVALSHA_FLOOR, decide: (key) => client.evalsha(sha, 1, `floor:${key}`, '1', ttl) };
}

/** Diagnostic: ratekeeper's token-bucket script sent bare, one EVALSHA per decision, with no limiter around it. */
export const RATEKEEPER_SCRIPT_BARE = "ratekeeper's token-bucket script, bare EVALSHA (no limiter around it)";

/**
 * ratekeeper's own token-bucket script, called as the floor is called: the same Redis work as a
 * decision of the limiter, without the limiter's client path, so the two tell apart what the
 * script costs and what batching and the client path cost.
 */
export async function ratekeeperScriptBare(client: Redis, rule: Rule): Promise<RedisContender> {
  const { plans } = await import('../src/redis/scripts');
  const { script, ruleArgs } = plans['token-bucket'];
  await client.script('LOAD', script.source);
  const args = ruleArgs(rule);
  return { name: RATEKEEPER_SCRIPT_BARE, decide: (key) => client.evalsha(script.sha1, 1, `rk-bare:${key}`, ...args) };
}

/** rate-limiter-flexible's RateLimiterRedis under the same rule. */
export function rateLimiterFlexible(client: Redis, rule: Rule): RedisContender {
  const limiter = new RateLimiterRedis({ storeClient: client, points: rule.limit, duration: rule.windowMs / 1000, keyPrefix: 'rlf' });
  return { name: RLF_REDIS, decide: (key) => limiter.consume(key) };
}

/** What the bench needs of ratekeeper/redis; read at run time, so the bench runs before it exists. */
export type RedisRateLimiterClass = new (options: {
  client: Redis;
  algorithm: string;
  rule: Rule;
  onStoreError: 'deny';
  prefix?: string;
  timeoutMs?: number;
  batch?: boolean;
}) => { tryAcquire(key: string): Promise<unknown> };

/** Diagnostic: token bucket without the timeout bookkeeping, to price it. */
export const RATEKEEPER_REDIS_NO_TIMER = 'ratekeeper RedisRateLimiter token-bucket, batch: false, timeoutMs: Infinity';

/** ratekeeper with `batch: false`: one script call per decision, comparable call for call with the floor. */
export const ratekeeperUnbatchedName = (algorithm: string): string => `ratekeeper RedisRateLimiter ${algorithm}, batch: false`;

/**
 * ratekeeper's Redis contenders: one per algorithm as configured by default (decisions of one tick
 * batched into one script call), the same with `batch: false`, if src/redis.ts exports
 * RedisRateLimiter. Adding a contender here is one entry in the returned list.
 */
async function ratekeeperRedis(client: Redis, rule: Rule, diagnostics: boolean): Promise<RedisContender[] | string> {
  let RedisRateLimiter: RedisRateLimiterClass | undefined;
  try {
    const module = (await import('../src/redis')) as Record<string, unknown>;
    RedisRateLimiter = module.RedisRateLimiter as RedisRateLimiterClass | undefined;
  } catch (error) {
    return `importing src/redis.ts failed: ${String(error)}`;
  }
  if (typeof RedisRateLimiter !== 'function') return 'src/redis.ts does not export RedisRateLimiter yet';
  const Limiter = RedisRateLimiter;
  const list = ALGORITHM_NAMES.map((algorithm): RedisContender => {
    const limiter = new Limiter({ client, algorithm, rule, onStoreError: 'deny', prefix: 'rk:' });
    return { name: ratekeeperRedisName(algorithm), decide: (key) => limiter.tryAcquire(key) };
  });
  const unbatched = ALGORITHM_NAMES.map((algorithm): RedisContender => {
    const limiter = new Limiter({ client, algorithm, rule, onStoreError: 'deny', prefix: 'rk1:', batch: false });
    return { name: ratekeeperUnbatchedName(algorithm), decide: (key) => limiter.tryAcquire(key) };
  });
  if (!diagnostics) return list;
  const untimed = new Limiter({ client, algorithm: 'token-bucket', rule, onStoreError: 'deny', prefix: 'rk-untimed:', timeoutMs: Infinity, batch: false });
  return [...list, ...unbatched, { name: RATEKEEPER_REDIS_NO_TIMER, decide: (key) => untimed.tryAcquire(key) }];
}

/**
 * Every contender over `client`: the floor, rate-limiter-flexible, and ratekeeper per algorithm
 * (with `diagnostics`, also each with `batch: false` and the token bucket without a timeout).
 */
export async function redisContenders(client: Redis, rule: Rule, diagnostics: boolean): Promise<RedisContender[]> {
  const ratekeeper = await ratekeeperRedis(client, rule, diagnostics);
  if (typeof ratekeeper === 'string') throw new Error(ratekeeper);
  return [await evalshaFloor(client, rule), rateLimiterFlexible(client, rule), ...ratekeeper];
}

/** The server's CPU time so far (used_cpu_user + used_cpu_sys of INFO cpu), µs. */
export async function redisCpuUs(client: Redis): Promise<number> {
  const info = (await client.info('cpu')) as string;
  const seconds = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1]);
  return (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6;
}

interface Sample {
  perSecond: number;
  serverUs: number;
  clientUs: number;
}

/** Runs IN_FLIGHT workers that each await one decision after another for `ms`. */
async function throughput(client: Redis, contender: RedisContender, keys: () => string, ms: number): Promise<Sample> {
  await client.config('RESETSTAT');
  const deadline = performance.now() + ms;
  let done = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < deadline) {
      await contender.decide(keys());
      done++;
    }
  };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const perSecond = done / ((performance.now() - started) / 1000);
  const used = process.cpuUsage(cpu);
  const stats = (await client.info('commandstats')) as string;
  const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(stats);
  const serverUs = evalsha === null ? NaN : Number(evalsha[2]) / done;
  return { perSecond, serverUs, clientUs: (used.user + used.system) / done };
}

async function main(): Promise<void> {
  const server = await spawnRedis();
  const client = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, enableAutoPipelining: false });
  try {
    await client.connect();
    const rule = MANY_RULE;
    const { keys, order } = manyKeysWorkload(REDIS_KEYS, 777);
    let position = 0;
    const nextKey = () => keys[order[position++ & (order.length - 1)]!]!;
    const contenders: RedisContender[] = [await evalshaFloor(client, rule), rateLimiterFlexible(client, rule)];
    const ratekeeper = await ratekeeperRedis(client, rule, true);
    if (typeof ratekeeper !== 'string') contenders.push(...ratekeeper);
    for (const contender of contenders) await throughput(client, contender, nextKey, WARMUP_MS);
    const empty = (): Record<string, number[]> => Object.fromEntries(contenders.map((c) => [c.name, []]));
    const samples = empty();
    const serverUs = empty();
    const clientUs = empty();
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < contenders.length; k++) {
        const contender = contenders[(round + k) % contenders.length]!;
        const sample = await throughput(client, contender, nextKey, SAMPLE_MS);
        samples[contender.name]!.push(sample.perSecond);
        serverUs[contender.name]!.push(sample.serverUs);
        clientUs[contender.name]!.push(sample.clientUs);
      }
    }
    const missing = typeof ratekeeper === 'string' ? { ratekeeperMissing: ratekeeper } : {};
    const result: RedisResult = { redisVersion: server.version, samples, serverUs, clientUs, ...missing };
    sendToParent(result);
  } finally {
    client.disconnect();
    await server.stop();
  }
}

// The slash: bench/in-flight-redis.ts imports this module, and its name ends in 'redis.ts' too.
if (process.argv[1]?.endsWith('/redis.ts')) await main();
