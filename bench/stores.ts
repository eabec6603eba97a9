// Child process: decisions per second and latency over the shared stores beyond Redis, each beside
// its peer on the same server, at 1, 8 and 32 calls in flight: PostgreSQL (ratekeeper's
// PostgresRateLimiter over pg and postgres.js, rate-limiter-flexible's RateLimiterPostgres over
// pg), Valkey (iovalkey and GLIDE, each beside rate-limiter-flexible's RateLimiterValkey /
// RateLimiterValkeyGlide) and Upstash through the loopback REST shim (beside a bare EVALSHA through
// the same client). Every server is started here on a random loopback port and stopped after.
// `node --import tsx bench/stores.ts [store]` runs one store alone. Run by run.ts.
import { Redis as UpstashRedis } from '@upstash/redis';
import { GlideClient, Logger } from '@valkey/valkey-glide';
import { Redis } from 'ioredis';
import Valkey from 'iovalkey';
import pg from 'pg';
import postgres from 'postgres';
import { RateLimiterPostgres, RateLimiterValkey, RateLimiterValkeyGlide } from 'rate-limiter-flexible';
import type { Rule } from '../src/index';
import { migrate, type PostgresAlgorithm, PostgresRateLimiter } from '../src/postgres';
import { RedisRateLimiter } from '../src/redis';
import { startRedisServer } from '../test/redis/helpers/redis-server';
import { startPostgres } from '../test/stores/servers/postgres-server';
import { startUpstashShim } from '../test/stores/support/upstash-shim';
import { MANY_RULE } from './algorithms';
import { sendToParent } from './child';
import { formatNumber, markdownTable, median, quantileSorted, textTable } from './stats';
import { manyKeysWorkload } from './workloads';

export const STORES = ['postgres', 'valkey', 'glide', 'upstash'] as const;
export type StoreName = (typeof STORES)[number];
export const IN_FLIGHT = [1, 8, 32] as const;
const KEYS = 10_000;
const ROUNDS = 3;
const SAMPLE_MS = 400;
const WARMUP_MS = 400;
/** Connections each pool may open, ratekeeper's and its peer's alike. */
export const POOL = 8;

export interface Contender {
  readonly name: string;
  /** The contender ratekeeper's row is compared with (its peer), or undefined for ratekeeper's rows. */
  readonly peer?: true;
  decide(key: string): Promise<unknown>;
}

export interface StoreRow {
  readonly name: string;
  readonly peer: boolean;
  readonly inFlight: number;
  /** Median of the rounds. */
  readonly perSecond: number;
  /** Over every call of every round, in ms. */
  readonly p50: number;
  readonly p99: number;
}

export interface StoresResult {
  readonly store: StoreName;
  readonly server: string;
  readonly rows: StoreRow[];
}

/** rate-limiter-flexible refuses by rejecting; a refusal is a decision like any other here. */
const settled = (promise: Promise<unknown>) => promise.catch((reason: unknown) => (reason instanceof Error ? Promise.reject(reason) : reason));

const rlfRule = (rule: Rule) => ({ points: rule.limit, duration: rule.windowMs / 1000 });

async function postgresContenders(rule: Rule): Promise<{ server: string; contenders: Contender[]; stop(): Promise<void> }> {
  const server = await startPostgres();
  const connection = { host: '127.0.0.1', port: server.port, user: 'postgres', database: 'postgres' };
  const pool = new pg.Pool({ ...connection, max: POOL });
  const rlfPool = new pg.Pool({ ...connection, max: POOL });
  const sql = postgres({ ...connection, max: POOL, onnotice: () => {} });
  // An idle client whose server stops at the end reports it on its pool: nothing to act on.
  for (const each of [pool, rlfPool]) each.on('error', () => {});
  await migrate(pool);
  const version = ((await pool.query('SHOW server_version')).rows[0] as { server_version: string }).server_version;
  const rlf = await new Promise<RateLimiterPostgres>((resolve, reject) => {
    const limiter: RateLimiterPostgres = new RateLimiterPostgres({ storeClient: rlfPool, storeType: 'pg', tableName: 'rlf', ...rlfRule(rule) }, (error?: unknown) =>
      error === undefined || error === null ? resolve(limiter) : reject(error),
    );
  });
  const ratekeeper = (client: pg.Pool | postgres.Sql, algorithm: PostgresAlgorithm, label: string): Contender => {
    const limiter = new PostgresRateLimiter({ client, algorithm, rule, onStoreError: 'deny', timeoutMs: 10_000 });
    return { name: `ratekeeper PostgresRateLimiter ${algorithm} (${label})`, decide: (key) => limiter.tryAcquire(key) };
  };
  return {
    server: `PostgreSQL ${version}`,
    contenders: [
      { name: `rate-limiter-flexible RateLimiterPostgres, fixed window (pg Pool ${POOL})`, peer: true, decide: (key) => settled(rlf.consume(key)) },
      ratekeeper(pool, 'fixed-window', `pg Pool ${POOL}`),
      ratekeeper(pool, 'token-bucket', `pg Pool ${POOL}`),
      ratekeeper(sql, 'token-bucket', `postgres.js max ${POOL}`),
      ratekeeper(pool, 'sliding-window-counter', `pg Pool ${POOL}`),
      ratekeeper(pool, 'sliding-window-log', `pg Pool ${POOL}`),
    ],
    stop: async () => {
      await Promise.all([pool.end(), rlfPool.end(), sql.end({ timeout: 1 })]);
      await server.destroy();
    },
  };
}

async function valkeyContenders(rule: Rule, glide: boolean): Promise<{ server: string; contenders: Contender[]; stop(): Promise<void> }> {
  const server = await startRedisServer({ binary: 'valkey-server' });
  const admin = new Valkey({ port: server.port, host: '127.0.0.1' });
  const version = /valkey_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? '?';
  const name = `Valkey ${version}`;
  if (glide) {
    Logger.setLoggerConfig('off');
    const client = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port: server.port }] });
    const peerClient = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port: server.port }] });
    const rlf = new RateLimiterValkeyGlide({ storeClient: peerClient, keyPrefix: 'rlf', ...rlfRule(rule) });
    const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule, onStoreError: 'deny', timeoutMs: 10_000 });
    return {
      server: name,
      contenders: [
        { name: 'rate-limiter-flexible RateLimiterValkeyGlide, fixed window (GLIDE)', peer: true, decide: (key) => settled(rlf.consume(key)) },
        { name: 'ratekeeper RedisRateLimiter fixed-window (GLIDE)', decide: (key) => limiter.tryAcquire(key) },
      ],
      stop: async () => {
        client.close();
        peerClient.close();
        admin.disconnect();
        await server.stop();
      },
    };
  }
  const client = new Valkey({ port: server.port, host: '127.0.0.1' });
  const peerClient = new Valkey({ port: server.port, host: '127.0.0.1' });
  const rlf = new RateLimiterValkey({ storeClient: peerClient, keyPrefix: 'rlf', ...rlfRule(rule) });
  const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule, onStoreError: 'deny', timeoutMs: 10_000 });
  return {
    server: name,
    contenders: [
      { name: 'rate-limiter-flexible RateLimiterValkey, fixed window (iovalkey)', peer: true, decide: (key) => settled(rlf.consume(key)) },
      { name: 'ratekeeper RedisRateLimiter fixed-window (iovalkey)', decide: (key) => limiter.tryAcquire(key) },
    ],
    stop: async () => {
      client.disconnect();
      peerClient.disconnect();
      admin.disconnect();
      await server.stop();
    },
  };
}

async function upstashContenders(rule: Rule): Promise<{ server: string; contenders: Contender[]; stop(): Promise<void> }> {
  const server = await startRedisServer();
  const redis = new Redis({ port: server.port, host: '127.0.0.1' });
  const shim = await startUpstashShim(redis, 'bench');
  const version = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? '?';
  const client = new UpstashRedis({ url: shim.url, token: 'bench' });
  const floorScript = "local v = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return v";
  const sha = (await redis.script('LOAD', floorScript)) as string;
  const ttl = String(rule.windowMs);
  const limiter = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule, onStoreError: 'deny', timeoutMs: 10_000 });
  return {
    server: `Redis ${version} behind the loopback Upstash REST shim`,
    contenders: [
      { name: 'floor: bare EVALSHA (INCR + PEXPIRE) through @upstash/redis', peer: true, decide: (key) => client.evalsha(sha, [`floor:${key}`], [ttl]) },
      { name: 'ratekeeper RedisRateLimiter fixed-window (@upstash/redis)', decide: (key) => limiter.tryAcquire(key) },
    ],
    stop: async () => {
      await shim.close();
      redis.disconnect();
      await server.stop();
    },
  };
}

/** Decides each key once, 32 in flight. */
export async function warm(contender: Contender, keys: readonly string[]): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < keys.length) await contender.decide(keys[next++]!);
  };
  await Promise.all(Array.from({ length: 32 }, worker));
}

/** Runs `inFlight` workers that each await one decision after another for `ms`, timing every call. */
export async function sample(contender: Contender, inFlight: number, nextKey: () => string, ms: number, latencies: number[]): Promise<number> {
  const deadline = performance.now() + ms;
  let done = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < deadline) {
      const started = performance.now();
      await contender.decide(nextKey());
      latencies.push(performance.now() - started);
      done++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  return done / ((performance.now() - started) / 1000);
}

async function measure(store: StoreName): Promise<StoresResult> {
  const rule = MANY_RULE;
  const setup = store === 'postgres' ? await postgresContenders(rule) : store === 'upstash' ? await upstashContenders(rule) : await valkeyContenders(rule, store === 'glide');
  const { keys, order } = manyKeysWorkload(KEYS, 4242);
  let position = 0;
  const nextKey = () => keys[order[position++ & (order.length - 1)]!]!;
  const rows: StoreRow[] = [];
  try {
    // Every key decided once before anything is timed: the rounds measure decisions on keys the
    // store holds (the steady state of "10 000 keys"), not the first insert of each, which costs a
    // store more than an update and would fall in whichever rounds came first.
    for (const contender of setup.contenders) await warm(contender, keys);
    for (const contender of setup.contenders) await sample(contender, 8, nextKey, WARMUP_MS, []);
    for (const inFlight of IN_FLIGHT) {
      const perSecond = new Map(setup.contenders.map((c) => [c.name, [] as number[]]));
      const latencies = new Map(setup.contenders.map((c) => [c.name, [] as number[]]));
      for (let round = 0; round < ROUNDS; round++) {
        for (let k = 0; k < setup.contenders.length; k++) {
          const contender = setup.contenders[(round + k) % setup.contenders.length]!;
          perSecond.get(contender.name)!.push(await sample(contender, inFlight, nextKey, SAMPLE_MS, latencies.get(contender.name)!));
        }
      }
      for (const contender of setup.contenders) {
        const sorted = Float64Array.from(latencies.get(contender.name)!).sort();
        rows.push({ name: contender.name, peer: contender.peer === true, inFlight, perSecond: median(perSecond.get(contender.name)!), p50: quantileSorted(sorted, 0.5), p99: quantileSorted(sorted, 0.99) });
      }
    }
  } finally {
    await setup.stop();
  }
  return { store, server: setup.server, rows };
}

/** The tables for bench/RESULTS.md and the console: each ratekeeper row with its ratio to the peer at the same load. */
export function renderStores(results: readonly StoresResult[]): { text: string; markdown: string } {
  const note = `Each store on its own server started by the bench (loopback, 2 shared cores, client and server on the same machine), ${formatNumber(KEYS)} keys in random order (each decided once before the rounds), a rule of 3600 per hour (nothing refused), ${ROUNDS} interleaved rounds of ${SAMPLE_MS} ms per load; decisions/s is the median round, p50/p99 over every call. "÷ peer" is this row's decisions/s over its peer's at the same load.`;
  const sections = results.map((result) => {
    const rows: string[][] = [['contender', 'in flight', 'decisions/s', '÷ peer', 'p50 ms', 'p99 ms']];
    for (const row of result.rows) {
      const peer = result.rows.find((other) => other.peer && other.inFlight === row.inFlight);
      const ratio = row.peer || peer === undefined ? '' : `${(row.perSecond / peer.perSecond).toFixed(2)}×`;
      rows.push([row.name, String(row.inFlight), formatNumber(row.perSecond), ratio, row.p50.toFixed(2), row.p99.toFixed(2)]);
    }
    return { title: `${result.store}: ${result.server}`, rows };
  });
  return {
    markdown: ['## Shared stores beyond Redis', '', note, '', ...sections.flatMap((s) => [`### ${s.title}`, '', markdownTable(s.rows), ''])].join('\n'),
    text: ['\n== Shared stores beyond Redis', note, ...sections.flatMap((s) => [`-- ${s.title}`, textTable(s.rows)])].join('\n'),
  };
}

// The slash: bench/ab-stores.ts, which imports this module, also ends in stores.ts.
if (process.argv[1]?.endsWith('/stores.ts')) {
  const store = process.argv[2] as StoreName;
  if (!STORES.includes(store)) throw new Error(`bench/stores.ts: the store must be one of ${STORES.join(', ')}, got ${store}`);
  sendToParent(await measure(store));
}
