// Child process: Redis decisions as a server's requests make them, each in its own macrotask
// (every caller awaits setImmediate before each call, as a request arriving in its own I/O callback
// does), at 1, 8, 64 and 256 in flight over one ioredis client, against a redis-server it spawns on
// a random loopback port and stops. Contenders: the bare EVALSHA floor, rate-limiter-flexible's
// RateLimiterRedis, and ratekeeper's RedisRateLimiter for every algorithm. Run by run.ts; run alone
// (`node --import tsx bench/redis-arrivals.ts [in-flight...]`) it prints its result as JSON.
import { Redis } from 'ioredis';
import { sendToParent } from './child';
import { quantileSorted } from './stats';
import { MANY_RULE } from './algorithms';
import { type RedisContender, ratekeeperScriptBare, redisContenders, redisCpuUs, REDIS_KEYS } from './redis';
import { spawnRedis } from './redis-server';
import { manyKeysWorkload } from './workloads';

export const ARRIVAL_IN_FLIGHT = [1, 8, 64, 256] as const;
export const ARRIVAL_ROUNDS = 5;
export const ARRIVAL_SAMPLE_MS = 200;
const WARMUP_MS = 200;
/** Latencies kept per sample: enough for a p99 of thousands, bounded in memory. */
const LATENCY_CAPACITY = 1 << 17;

export interface ArrivalSample {
  readonly perSecond: number;
  /** Wall time from a call to its answer, ms. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Redis server CPU (used_cpu_user + used_cpu_sys: scripts, parsing, socket I/O) per decision, µs. */
  readonly serverUs: number;
  /** EVALSHA (and EVAL) time alone from INFO commandstats, per decision, µs. */
  readonly scriptUs: number;
  /** This Node process's CPU per decision, µs, the arrival loop included (the same for every contender). */
  readonly clientUs: number;
  /** Decisions per script call: the mean batch size. */
  readonly perScript: number;
}

export interface ArrivalResult {
  readonly redisVersion: string;
  /** Samples per in-flight level, per contender, one per round. */
  readonly samples: Record<number, Record<string, ArrivalSample[]>>;
}

const nextMacrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** `inFlight` callers, each awaiting a macrotask, then one decision, again and again for `ms`. */
export async function sample(client: Redis, contender: RedisContender, inFlight: number, key: () => string, ms: number): Promise<ArrivalSample> {
  const latencies = new Float64Array(LATENCY_CAPACITY);
  let done = 0;
  await client.config('RESETSTAT');
  const cpuBefore = await redisCpuUs(client);
  const deadline = performance.now() + ms;
  const caller = async (): Promise<void> => {
    while (performance.now() < deadline) {
      await nextMacrotask();
      const started = performance.now();
      await contender.decide(key());
      latencies[done++ & (LATENCY_CAPACITY - 1)] = performance.now() - started;
    }
  };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: inFlight }, caller));
  const perSecond = done / ((performance.now() - started) / 1000);
  const used = process.cpuUsage(cpu);
  const serverUs = ((await redisCpuUs(client)) - cpuBefore) / done;
  const stats = (await client.info('commandstats')) as string;
  let scriptUsec = 0;
  let scriptCalls = 0;
  for (const match of stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+),usec=(\d+)/g)) {
    scriptCalls += Number(match[1]);
    scriptUsec += Number(match[2]);
  }
  const kept = Array.from(latencies.subarray(0, Math.min(done, LATENCY_CAPACITY))).sort((a, b) => a - b);
  return {
    perSecond,
    p50Ms: quantileSorted(kept, 0.5),
    p99Ms: quantileSorted(kept, 0.99),
    serverUs,
    scriptUs: scriptUsec / done,
    clientUs: (used.user + used.system) / done,
    perScript: done / scriptCalls,
  };
}

async function main(): Promise<void> {
  const levels = process.argv.slice(2).map(Number).filter((n) => n > 0);
  const inFlightLevels = levels.length > 0 ? levels : ARRIVAL_IN_FLIGHT;
  const only = process.env.BENCH_CONTENDERS?.split(',');
  const server = await spawnRedis();
  const client = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, enableAutoPipelining: false });
  try {
    await client.connect();
    const { keys, order } = manyKeysWorkload(REDIS_KEYS, 778);
    let position = 0;
    const nextKey = () => keys[order[position++ & (order.length - 1)]!]!;
    const all = await redisContenders(client, MANY_RULE, false);
    const chosen = only === undefined ? all : all.filter((c) => only.some((name) => c.name.includes(name)));
    // At one in flight, latency is the point: the script sent bare tells its cost from the client path's.
    const alone = [...chosen, await ratekeeperScriptBare(client, MANY_RULE)];
    const samples: Record<number, Record<string, ArrivalSample[]>> = {};
    for (const inFlight of inFlightLevels) {
      const contenders = inFlight === 1 ? alone : chosen;
      samples[inFlight] = Object.fromEntries(contenders.map((c) => [c.name, []]));
      for (const contender of contenders) await sample(client, contender, inFlight, nextKey, WARMUP_MS);
      for (let round = 0; round < ARRIVAL_ROUNDS; round++) {
        for (let k = 0; k < contenders.length; k++) {
          const contender = contenders[(round + k) % contenders.length]!;
          samples[inFlight]![contender.name]!.push(await sample(client, contender, inFlight, nextKey, ARRIVAL_SAMPLE_MS));
        }
      }
    }
    sendToParent({ redisVersion: server.version, samples } satisfies ArrivalResult);
  } finally {
    client.disconnect();
    await server.stop();
  }
}

if (process.argv[1]?.endsWith('redis-arrivals.ts')) await main();
