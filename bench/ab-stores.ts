// Child process of bench/ab.ts: two trees' store code side by side in this one process, against one
// server it starts on a random loopback port. Each tree's RedisRateLimiter / PostgresRateLimiter is
// imported from `<tree>/src/redis.ts` / `<tree>/src/postgres.ts` through tsx (the benches run the
// sources, not dist), so the old and the new classes are separate modules; their keys are kept
// apart (a prefix per tree on Redis, a database per tree on PostgreSQL), so neither tree reads what
// the other wrote (the new layout adopts the previous version's keys).
//
// - `redis <old> <new>`: bench/redis-arrivals.ts's sample at 64 in flight, one call per macrotask,
//   for the bare EVALSHA floor, rate-limiter-flexible and each tree's five algorithms, in
//   interleaved rounds: decisions/s, Redis CPU (INFO cpu deltas) and Node CPU per decision.
// - `postgres <old> <new>`: bench/stores.ts's sample at 1, 8 and 32 in flight, each tree's five
//   algorithms over a pg Pool and its token bucket over postgres.js, in interleaved rounds:
//   decisions/s, the server's CPU (its processes' /proc/<pid>/schedstat) and Node CPU per decision.
//
// `node --import tsx bench/ab-stores.ts redis|postgres <old> <new> [rounds] [sample ms]` prints the result as JSON.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import postgres from 'postgres';
import { startPostgres } from '../test/stores/servers/postgres-server';
import { ALGORITHM_NAMES, type AlgorithmName, MANY_RULE, ruleFor } from './algorithms';
import { sendToParent } from './child';
import { type RedisContender, type RedisRateLimiterClass, evalshaFloor, rateLimiterFlexible, REDIS_KEYS } from './redis';
import { type ArrivalSample, sample as arrivalSample } from './redis-arrivals';
import { spawnRedis } from './redis-server';
import { POOL, sample as storeSample, warm } from './stores';
import { manyKeysWorkload } from './workloads';

export const AB_TREES = ['old', 'new'] as const;
export type AbTree = (typeof AB_TREES)[number];

/** Calls in flight on Redis: the "one call per macrotask, 64 in flight". */
export const AB_REDIS_IN_FLIGHT = 64;
export const AB_POSTGRES_IN_FLIGHT = [1, 8, 32] as const;
/** One sample of a contender, Redis and PostgreSQL alike, unless `--sample-ms` says otherwise. */
export const AB_STORE_SAMPLE_MS = 300;
const WARMUP_MS = 300;

export interface AbRedisResult {
  readonly redisVersion: string;
  /** One sample per round. */
  readonly floor: ArrivalSample[];
  readonly rlf: ArrivalSample[];
  readonly trees: Record<AbTree, Record<AlgorithmName, ArrivalSample[]>>;
}

/** The PostgreSQL contenders of one tree: each algorithm over a pg Pool, and the token bucket over postgres.js. */
export const AB_POSTGRES_CONTENDERS = [...ALGORITHM_NAMES.map((algorithm) => `${algorithm} (pg)`), 'token-bucket (postgres.js)'];

export interface PostgresSample {
  readonly perSecond: number;
  /** CPU of the PostgreSQL server's processes (postmaster and its children) per decision, µs. */
  readonly serverUs: number;
  /** This Node process's CPU per decision, µs. */
  readonly clientUs: number;
}

export interface AbPostgresResult {
  readonly server: string;
  /** One sample per round, per in-flight level, tree and contender. */
  readonly levels: Record<number, Record<AbTree, Record<string, PostgresSample[]>>>;
}

interface Named extends RedisContender {
  readonly tree?: AbTree;
  readonly label: string;
}

const importTree = async (tree: string, entry: string): Promise<Record<string, unknown>> => (await import(pathToFileURL(join(tree, 'src', entry)).href)) as Record<string, unknown>;

/**
 * Each contender once per round, the order rotated every round and reversed every other round: old
 * and new of a pair run moments apart, the old first in one round and the new in the next, so that
 * a load rising or falling through a round favours neither.
 */
async function rounds<T>(contenders: readonly Named[], count: number, run: (contender: Named) => Promise<T>): Promise<Map<Named, T[]>> {
  const samples = new Map(contenders.map((c) => [c, [] as T[]]));
  for (let round = 0; round < count; round++) {
    const order = contenders.map((_, k) => contenders[(round + k) % contenders.length]!);
    if (round % 2 === 1) order.reverse();
    for (const contender of order) samples.get(contender)!.push(await run(contender));
  }
  return samples;
}

/** Two trees' contenders, old and new of each algorithm next to each other. */
function pairs(make: (tree: AbTree, algorithm: AlgorithmName) => Named): Named[] {
  return ALGORITHM_NAMES.flatMap((algorithm) => AB_TREES.map((tree) => make(tree, algorithm)));
}

async function redis(paths: Record<AbTree, string>, count: number, sampleMs: number): Promise<AbRedisResult> {
  const server = await spawnRedis();
  const client = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, enableAutoPipelining: false });
  try {
    await client.connect();
    const classes = {} as Record<AbTree, RedisRateLimiterClass>;
    for (const tree of AB_TREES) classes[tree] = (await importTree(paths[tree], 'redis.ts')).RedisRateLimiter as RedisRateLimiterClass;
    const floor = { ...(await evalshaFloor(client, MANY_RULE)), label: 'floor' };
    const rlf = { ...rateLimiterFlexible(client, MANY_RULE), label: 'rlf' };
    const contenders: Named[] = [
      floor,
      rlf,
      ...pairs((tree, algorithm) => {
        const limiter = new classes[tree]({ client, algorithm, rule: ruleFor(algorithm, false), onStoreError: 'deny', prefix: `ab-${tree}:` });
        return { name: `${tree} ${algorithm}`, tree, label: algorithm, decide: (key) => limiter.tryAcquire(key) };
      }),
    ];
    const { keys, order } = manyKeysWorkload(REDIS_KEYS, 778);
    let position = 0;
    const nextKey = () => keys[order[position++ & (order.length - 1)]!]!;
    // Every key decided once first: a key's first call (a new state, and in the new layout a look
    // for the previous version's key) is not what "per decision" measures.
    for (const contender of contenders) {
      await warm(contender, keys);
      await arrivalSample(client, contender, AB_REDIS_IN_FLIGHT, nextKey, WARMUP_MS);
    }
    const samples = await rounds(contenders, count, (contender) => arrivalSample(client, contender, AB_REDIS_IN_FLIGHT, nextKey, sampleMs));
    const trees = { old: {}, new: {} } as AbRedisResult['trees'];
    for (const contender of contenders) if (contender.tree !== undefined) trees[contender.tree][contender.label as AlgorithmName] = samples.get(contender)!;
    return { redisVersion: server.version, floor: samples.get(floor)!, rlf: samples.get(rlf)!, trees };
  } finally {
    client.disconnect();
    await server.stop();
  }
}

/** What this child needs of a tree's src/postgres.ts. */
interface PostgresModule {
  readonly migrate: (client: pg.Pool) => Promise<void>;
  readonly PostgresRateLimiter: new (options: { client: pg.Pool | postgres.Sql; algorithm: string; rule: unknown; onStoreError: 'deny'; timeoutMs: number }) => {
    tryAcquire(key: string): Promise<unknown>;
  };
}

/**
 * CPU time so far of the postmaster `pid` and each of its children (backends, background workers),
 * ns per process, from /proc/<pid>/schedstat: exact, where /proc/<pid>/stat counts 10 ms ticks.
 */
function postgresCpuNs(postmaster: number): Map<number, number> {
  const cpu = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      // The parent's pid is the second field after the command, which is in parentheses and may hold any.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (pid !== postmaster && ppid !== postmaster) continue;
      cpu.set(pid, Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]));
    } catch {
      // A process that ended between the listing and the read: whatever it ran since the last
      // reading is lost, and the pools keep their backends, so that is little.
    }
  }
  return cpu;
}

/** bench/stores.ts's sample, with the server's CPU and this process's around it. */
async function postgresSample(postmaster: number, contender: Named, inFlight: number, nextKey: () => string, ms: number): Promise<PostgresSample> {
  const before = postgresCpuNs(postmaster);
  const cpu = process.cpuUsage();
  const latencies: number[] = [];
  const perSecond = await storeSample(contender, inFlight, nextKey, ms, latencies);
  const decisions = latencies.length;
  const used = process.cpuUsage(cpu);
  let serverNs = 0;
  for (const [pid, ns] of postgresCpuNs(postmaster)) serverNs += ns - (before.get(pid) ?? 0);
  return { perSecond, serverUs: serverNs / 1000 / decisions, clientUs: (used.user + used.system) / decisions };
}

async function postgresBench(paths: Record<AbTree, string>, count: number, sampleMs: number): Promise<AbPostgresResult> {
  const server = await startPostgres();
  const connection = { host: '127.0.0.1', port: server.port, user: 'postgres' };
  const admin = new pg.Pool({ ...connection, database: 'postgres', max: 1 });
  const pools: pg.Pool[] = [];
  const sqls: postgres.Sql[] = [];
  try {
    const version = ((await admin.query('SHOW server_version')).rows[0] as { server_version: string }).server_version;
    const contenders: Named[] = [];
    for (const tree of AB_TREES) {
      // A database per tree: each migrates its own table and functions, as a deployment of it would.
      await admin.query(`CREATE DATABASE ab_${tree}`);
      const module = (await importTree(paths[tree], 'postgres.ts')) as unknown as PostgresModule;
      const pool = new pg.Pool({ ...connection, database: `ab_${tree}`, max: POOL });
      // An idle client whose server stops at the end reports it on its pool: nothing to act on.
      pool.on('error', () => {});
      const sql = postgres({ ...connection, database: `ab_${tree}`, max: POOL, onnotice: () => {} });
      pools.push(pool);
      sqls.push(sql);
      await module.migrate(pool);
      const limiter = (client: pg.Pool | postgres.Sql, algorithm: AlgorithmName, label: string): Named => {
        const made = new module.PostgresRateLimiter({ client, algorithm, rule: ruleFor(algorithm, false), onStoreError: 'deny', timeoutMs: 10_000 });
        return { name: `${tree} ${label}`, tree, label, decide: (key) => made.tryAcquire(key) };
      };
      const [tokenBucketPostgresJs] = AB_POSTGRES_CONTENDERS.slice(-1);
      contenders.push(...ALGORITHM_NAMES.map((algorithm) => limiter(pool, algorithm, `${algorithm} (pg)`)), limiter(sql, 'token-bucket', tokenBucketPostgresJs!));
    }
    // Old and new of each contender next to each other in every round.
    contenders.sort((a, b) => AB_POSTGRES_CONTENDERS.indexOf(a.label) - AB_POSTGRES_CONTENDERS.indexOf(b.label));
    const { keys, order } = manyKeysWorkload(REDIS_KEYS, 4242);
    let position = 0;
    const nextKey = () => keys[order[position++ & (order.length - 1)]!]!;
    for (const contender of contenders) await warm(contender, keys);
    for (const contender of contenders) await storeSample(contender, 8, nextKey, WARMUP_MS, []);
    const levels: AbPostgresResult['levels'] = {};
    for (const inFlight of AB_POSTGRES_IN_FLIGHT) {
      const samples = await rounds(contenders, count, (contender) => postgresSample(server.process.pid!, contender, inFlight, nextKey, sampleMs));
      const level = { old: {}, new: {} } as AbPostgresResult['levels'][number];
      for (const contender of contenders) level[contender.tree!][contender.label] = samples.get(contender)!;
      levels[inFlight] = level;
    }
    return { server: `PostgreSQL ${version}`, levels };
  } finally {
    await Promise.all([admin.end(), ...pools.map((pool) => pool.end()), ...sqls.map((sql) => sql.end({ timeout: 1 }))]);
    await server.destroy();
  }
}

async function main(): Promise<void> {
  const [store, old, now, count = '3', sampleMs = String(AB_STORE_SAMPLE_MS)] = process.argv.slice(2);
  if ((store !== 'redis' && store !== 'postgres') || old === undefined || now === undefined) {
    throw new Error(`ab-stores.ts: usage: redis|postgres <old tree> <new tree> [rounds] [sample ms], got ${process.argv.slice(2).join(' ')}`);
  }
  const paths = { old, new: now };
  sendToParent(store === 'redis' ? await redis(paths, Number(count), Number(sampleMs)) : await postgresBench(paths, Number(count), Number(sampleMs)));
}

if (process.argv[1]?.endsWith('ab-stores.ts')) await main();
