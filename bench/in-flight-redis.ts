// Child process: an in-flight limit over Redis (issue 25), ratekeeper's RedisRateLimiter with
// `concurrency` beside bottleneck's Redis mode (`datastore: 'ioredis'`, `maxConcurrent`). 64 async
// callers each loop "take a permit of one key, run the task, release" under a limit of 8, against a
// redis-server this process spawns on a random loopback port and stops. Each caller awaits the
// release before its next take, as bottleneck's `schedule` resolves only after its release
// (`free`) is answered. Two tasks: a no-op (the limiter's own cost; tasks then never overlap) and a
// 1 ms timer (tasks overlap, so the limit binds and the in-flight count is tested). Interleaved
// rounds, the order rotating. Run by run.ts; alone,
// `node --expose-gc --import tsx bench/in-flight-redis.ts` prints its table.
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { Concurrency, Rule } from '../src/index';
import { RedisRateLimiter } from '../src/redis';
import { sendToParent } from './child';
import { redisCpuUs } from './redis';
import { spawnRedis } from './redis-server';
import { formatNumber, formatRatio, markdownTable, median, ratioMedian, textTable } from './stats';

const CALLERS = 64;
const LIMIT = 8;
const ROUNDS = 7;
const SAMPLE_MS = 400;
const WARMUP_MS = 400;
/** Far longer than a task: a lease here ends by its release, never by its end. */
const LEASE_MS = 10_000;
const KEY = 'job-queue';

/** The tasks each permit is held around. */
const TASKS: Record<string, () => Promise<void>> = {
  'no-op': () => Promise.resolve(),
  '1 ms timer': () => new Promise((resolve) => setTimeout(resolve, 1)),
};

const RATEKEEPER = `ratekeeper RedisRateLimiter, Concurrency(${LIMIT})`;
const RATEKEEPER_RATE = `ratekeeper RedisRateLimiter, token-bucket + Concurrency(${LIMIT})`;
const BOTTLENECK = `bottleneck 2.19.5 Redis mode (ioredis), maxConcurrent ${LIMIT}`;

/** Runs `task` holding one in-flight permit; resolves once the permit is released. */
interface InFlightContender {
  readonly name: string;
  /** Resolves false when the permit was not granted (the task did not run). */
  hold(task: () => Promise<void>): Promise<boolean>;
  close(): Promise<void>;
}

export interface InFlightRedisSample {
  readonly perSecond: number;
  /** This Node process's CPU per completed task, µs (bottleneck's own two connections included). */
  readonly clientUs: number;
  /** Redis server CPU (used_cpu_user + used_cpu_sys) per completed task, µs. */
  readonly serverUs: number;
  /** Script calls (EVALSHA and EVAL, from INFO commandstats) per completed task. */
  readonly scripts: number;
  /** Most tasks running at once, counted between the grant and the release. */
  readonly maxInFlight: number;
  /** Takes that came back without a permit (a refusal or an outage answer). */
  readonly refused: number;
}

export interface InFlightRedisResult {
  readonly redisVersion: string;
  /** Per task, per contender, one sample per round. */
  readonly samples: Record<string, Record<string, InFlightRedisSample[]>>;
}

function ratekeeper(client: Redis, name: string, withRate: boolean): InFlightContender {
  const concurrency = new Concurrency(LIMIT, { leaseMs: LEASE_MS });
  // A rate that never refuses: the in-flight part is the one that binds.
  const limiter = withRate
    ? new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(2 ** 40, 60_000), concurrency, onStoreError: 'deny', name: 'rated' })
    : new RedisRateLimiter({ client, concurrency, onStoreError: 'deny', name: 'alone' });
  return {
    name,
    async hold(task) {
      const lease = await limiter.lease(KEY);
      if (!lease.decision.allowed) return false;
      try {
        await task();
      } finally {
        await lease.settle(1);
      }
      return true;
    },
    async close() {
      limiter.close();
    },
  };
}

async function bottleneck(port: number): Promise<InFlightContender> {
  const limiter = new Bottleneck({ id: 'bench-in-flight', maxConcurrent: LIMIT, datastore: 'ioredis', clearDatastore: true, clientOptions: { host: '127.0.0.1', port } });
  await limiter.ready();
  return {
    name: BOTTLENECK,
    async hold(task) {
      await limiter.schedule(task);
      return true;
    },
    close: () => limiter.disconnect(),
  };
}

/** `CALLERS` callers, each holding a permit around `work` again and again for `ms`. */
async function sample(admin: Redis, contender: InFlightContender, work: () => Promise<void>, ms: number): Promise<InFlightRedisSample> {
  let running = 0;
  let maxInFlight = 0;
  const task = async (): Promise<void> => {
    if (++running > maxInFlight) maxInFlight = running;
    await work();
    running--;
  };
  let done = 0;
  let refused = 0;
  await admin.config('RESETSTAT');
  const serverBefore = await redisCpuUs(admin);
  const deadline = performance.now() + ms;
  const caller = async (): Promise<void> => {
    while (performance.now() < deadline) {
      if (await contender.hold(task)) done++;
      else refused++;
    }
  };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: CALLERS }, caller));
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const serverUs = (await redisCpuUs(admin)) - serverBefore;
  let scripts = 0;
  for (const match of ((await admin.info('commandstats')) as string).matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)) scripts += Number(match[1]);
  return { perSecond: done / seconds, clientUs: (used.user + used.system) / done, serverUs: serverUs / done, scripts: scripts / done, maxInFlight, refused };
}

async function main(): Promise<void> {
  const server = await spawnRedis();
  const admin = new Redis({ port: server.port, host: '127.0.0.1' });
  const client = new Redis({ port: server.port, host: '127.0.0.1', enableAutoPipelining: false });
  const contenders = [ratekeeper(client, RATEKEEPER, false), ratekeeper(client, RATEKEEPER_RATE, true), await bottleneck(server.port)];
  try {
    const samples: InFlightRedisResult['samples'] = {};
    for (const [taskName, work] of Object.entries(TASKS)) {
      const taken: Record<string, InFlightRedisSample[]> = (samples[taskName] = Object.fromEntries(contenders.map((c) => [c.name, []])));
      for (const contender of contenders) await sample(admin, contender, work, WARMUP_MS);
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 === 0 ? contenders : [...contenders].reverse();
        for (let k = 0; k < order.length; k++) {
          const contender = order[(round + k) % order.length]!;
          taken[contender.name]!.push(await sample(admin, contender, work, SAMPLE_MS));
        }
      }
    }
    const result: InFlightRedisResult = { redisVersion: server.version, samples };
    if (process.send === undefined) console.log(renderInFlightRedis(result).text);
    sendToParent(result);
  } finally {
    for (const contender of contenders) await contender.close();
    admin.disconnect();
    client.disconnect();
    await server.stop();
  }
}

/** The table, each contender's medians and its ratios to bottleneck (medians of per-round ratios). */
export function renderInFlightRedis(result: InFlightRedisResult): { text: string; markdown: string } {
  const peer = BOTTLENECK;
  const row = (taskName: string, samples: Record<string, InFlightRedisSample[]>, name: string): string[] => {
    const series = (of: string, field: keyof InFlightRedisSample) => (samples[of] ?? []).map((s) => s[field]);
    // Throughput: this ÷ bottleneck; CPU per task: bottleneck ÷ this (above 1 when this spends less).
    const ratio = (field: 'perSecond' | 'clientUs' | 'serverUs') =>
      name === peer ? '' : formatRatio(field === 'perSecond' ? ratioMedian(series(name, field), series(peer, field)) : ratioMedian(series(peer, field), series(name, field)));
    return [
      taskName,
      name,
      formatNumber(median(series(name, 'perSecond'))),
      ratio('perSecond'),
      formatNumber(median(series(name, 'clientUs')), 1),
      ratio('clientUs'),
      formatNumber(median(series(name, 'serverUs')), 1),
      ratio('serverUs'),
      formatNumber(median(series(name, 'scripts')), 2),
      String(Math.max(...series(name, 'maxInFlight'))),
      String(series(name, 'refused').reduce((a, b) => a + b, 0)),
    ];
  };
  const rows = [
    ['task', 'contender', 'tasks/s', '÷ bottleneck', 'Node CPU µs/task', 'bottleneck ÷ this', 'Redis CPU µs/task', 'bottleneck ÷ this', 'script calls/task', `max in flight (limit ${LIMIT})`, 'refused takes'],
    ...Object.entries(result.samples).flatMap(([taskName, samples]) => Object.keys(samples).map((name) => row(taskName, samples, name))),
  ];
  const title = `In-flight limits over Redis ${result.redisVersion}: ${CALLERS} callers, limit ${LIMIT}, beside bottleneck's Redis mode`;
  const about = `${CALLERS} async callers each loop: take a permit of one key, await the task (a no-op; or a 1 ms timer, so that tasks overlap and the limit binds), release, and await the release (bottleneck's \`schedule\` resolves after its \`free\` is answered). ratekeeper: \`lease(key)\` then \`settle(1)\` on a RedisRateLimiter with \`concurrency: new Concurrency(${LIMIT}, { leaseMs: ${LEASE_MS} })\`, alone and beside a token-bucket rate that never refuses, over one ioredis client (batching on, its default). bottleneck: \`schedule(task)\` on \`new Bottleneck({ maxConcurrent: ${LIMIT}, datastore: 'ioredis' })\`, which opens its own client and subscriber. One redis-server spawned for the run. Node CPU is this process's (process.cpuUsage) per completed task; Redis CPU is the server's used_cpu_user + used_cpu_sys per completed task; script calls are EVALSHA and EVAL calls (INFO commandstats) per completed task. Max in flight is the most tasks running at once, counted inside the task, over all rounds (never above the limit for a correct limiter). ${ROUNDS} interleaved rounds of ${SAMPLE_MS} ms after a ${WARMUP_MS} ms warm-up each; figures are medians of the rounds, ratios medians of per-round ratios.`;
  return { text: `\n${title}\n${textTable(rows)}\n`, markdown: `\n## ${title}\n\n${about}\n\n${markdownTable(rows)}\n` };
}

if (process.argv[1]?.endsWith('in-flight-redis.ts')) await main();
