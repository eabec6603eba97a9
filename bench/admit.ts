// Issue 25's targets for `admit` in memory: an admission of three parts (requests per user,
// requests per org, tokens per org) against the three `reserve` calls it is made of, and the same
// with each admission settled against each reservation settled. CPU time, interleaved rounds,
// median of per-round ratios. Then the same three parts over Redis: admit's one script against the
// in-order path's three reservations awaited one after another. Run by run.ts; alone,
// `node --expose-gc --import tsx bench/admit.ts` prints its tables.
import { Redis } from 'ioredis';
import { admit, KeyedRateLimiter, Rule, TokenBucket, type Reservation } from '../src/index';
import { RedisRateLimiter } from '../src/redis';
import { spawnRedis } from './redis-server';
import { type Contender } from './contenders';
import { measure, sunkValue } from './measure';
import { sendToParent } from './child';
import { formatNumber, formatRatio, markdownTable, median, ratioMedian, textTable } from './stats';

const USERS = 1024;
const ORGS = 16;
const users = Array.from({ length: USERS }, (_, i) => `user-${i}`);
const orgs = Array.from({ length: ORGS }, (_, i) => `org-${i}`);
// Never refused: every admission is granted, the path a settle follows.
const huge = new Rule(2 ** 40, 60_000);
const limiters = () => Array.from({ length: 3 }, () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(huge) }));

// Each contender's loop is written out (as in bench/contenders.ts): a loop shared through a callback
// makes its call site polymorphic, which costs the four contenders unevenly (measured: the admit ÷
// reserve ratio spread from 0.87 to 1.33 between runs, against 1.11 to 1.29 written out).

/** Three reservations per operation, one per limiter, settled (1, 1, 700 of 1000 tokens) when `settle`. */
function reserveThree(name: string, settle: boolean): Contender {
  const [perUser, perOrg, tokens] = limiters() as [KeyedRateLimiter, KeyedRateLimiter, KeyedRateLimiter];
  return {
    name,
    run(start, n) {
      let acc = 0;
      for (let i = start; i < start + n; i++) {
        const user = users[i & (USERS - 1)]!;
        const org = orgs[i & (ORGS - 1)]!;
        const a: Reservation = perUser.reserve(user);
        const b: Reservation = perOrg.reserve(org);
        const c: Reservation = tokens.reserve(org, 1000);
        acc += a.decision.remaining + b.decision.remaining + c.decision.remaining;
        if (settle) {
          a.settle(1);
          b.settle(1);
          acc += c.settle(700).remaining;
        }
      }
      return acc;
    },
  };
}

/** One admission of the same three parts per operation, settled the same way when `settle`. */
function admitThree(name: string, settle: boolean): Contender {
  const [perUser, perOrg, tokens] = limiters() as [KeyedRateLimiter, KeyedRateLimiter, KeyedRateLimiter];
  const actual = [1, 1, 700];
  return {
    name,
    run(start, n) {
      let acc = 0;
      for (let i = start; i < start + n; i++) {
        const user = users[i & (USERS - 1)]!;
        const org = orgs[i & (ORGS - 1)]!;
        const admission = admit([
          { limiter: perUser, key: user },
          { limiter: perOrg, key: org },
          { limiter: tokens, key: org, permits: 1000 },
        ]);
        acc += admission.decision.remaining;
        if (settle) acc += admission.settle(actual)[2]!.remaining;
      }
      return acc;
    },
  };
}

export interface AdmitResult {
  /** ns per operation, median of the rounds. */
  readonly ns: Record<string, number>;
  /** admit ÷ three reserve (target ≤ 1.2), and admit + settle ÷ three reserve + settle (target ≤ 1.2). */
  readonly ratios: { readonly admit: number; readonly admitSettle: number };
  readonly redis: RedisAdmitResult;
}

/** Per admission over Redis, medians of the rounds: wall µs (one caller awaiting each), Redis CPU µs, this process's CPU µs, and script calls. */
export interface RedisAdmitResult {
  readonly version: string;
  readonly rows: Record<'one script' | 'in order', { wallUs: number; redisCpuUs: number; nodeCpuUs: number; calls: number }>;
}

const REDIS_ROUNDS = 7;
const REDIS_SAMPLE_MS = 300;

/**
 * Three parts over one ioredis client (a token bucket per user, a sliding window counter per org,
 * a fixed window of 1000 tokens per org, never refusing), one caller awaiting each admission: admit
 * (one script) against the in-order path's three reservations awaited one after another (what
 * admit sends when the keys are in different slots, granted). Interleaved rounds on one server.
 */
async function redisAdmitBench(): Promise<RedisAdmitResult> {
  const server = await spawnRedis();
  const client = new Redis({ port: server.port, host: '127.0.0.1' });
  try {
    const common = { client, onStoreError: 'deny' as const, rule: huge, prefix: 'bench:' };
    const perUser = new RedisRateLimiter({ ...common, algorithm: 'token-bucket', name: 'user' });
    const perOrg = new RedisRateLimiter({ ...common, algorithm: 'sliding-window-counter', name: 'org' });
    const tokens = new RedisRateLimiter({ ...common, algorithm: 'fixed-window', name: 'tokens' });
    let i = 0;
    const contenders: Record<keyof RedisAdmitResult['rows'], () => Promise<number>> = {
      'one script': async () => {
        const user = users[i & (USERS - 1)]!;
        const org = orgs[i++ & (ORGS - 1)]!;
        const admission = await admit([
          { limiter: perUser, key: user },
          { limiter: perOrg, key: org },
          { limiter: tokens, key: org, permits: 1000 },
        ]);
        return admission.decision.remaining;
      },
      'in order': async () => {
        const user = users[i & (USERS - 1)]!;
        const org = orgs[i++ & (ORGS - 1)]!;
        const a = await perUser.reserve(user);
        const b = await perOrg.reserve(org);
        const c = await tokens.reserve(org, 1000);
        return a.decision.remaining + b.decision.remaining + c.decision.remaining;
      },
    };
    const redisCpu = async () => {
      const info = await client.info('cpu');
      return (Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1])) * 1e6;
    };
    const calls = async () => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await client.info('commandstats'))?.[1] ?? 0);
    const samples = new Map<string, { wallUs: number[]; redisCpuUs: number[]; nodeCpuUs: number[]; calls: number[] }>();
    // A warm-up: scripts loaded, keys made, code optimized.
    for (const run of Object.values(contenders)) for (let n = 0; n < 3000; n++) await run();
    let sink = 0;
    for (let round = 0; round < REDIS_ROUNDS; round++) {
      for (const [name, run] of Object.entries(contenders)) {
        const [cpuBefore, callsBefore] = [await redisCpu(), await calls()];
        const node = process.cpuUsage();
        const started = performance.now();
        let n = 0;
        while (performance.now() - started < REDIS_SAMPLE_MS) {
          sink += await run();
          n++;
        }
        const wall = performance.now() - started;
        const nodeCpu = process.cpuUsage(node);
        const [cpuAfter, callsAfter] = [await redisCpu(), await calls()];
        const entry = samples.get(name) ?? { wallUs: [], redisCpuUs: [], nodeCpuUs: [], calls: [] };
        entry.wallUs.push((wall * 1000) / n);
        // INFO's own calls are a few, beside thousands of admissions.
        entry.redisCpuUs.push((cpuAfter - cpuBefore) / n);
        entry.nodeCpuUs.push((nodeCpu.user + nodeCpu.system) / n);
        entry.calls.push((callsAfter - callsBefore) / n);
        samples.set(name, entry);
      }
    }
    if (sink === 0.5) console.log(sink);
    const rows = Object.fromEntries(
      [...samples].map(([name, entry]) => [name, { wallUs: median(entry.wallUs), redisCpuUs: median(entry.redisCpuUs), nodeCpuUs: median(entry.nodeCpuUs), calls: median(entry.calls) }]),
    ) as RedisAdmitResult['rows'];
    return { version: server.version, rows };
  } finally {
    client.disconnect();
    await server.stop();
  }
}

export async function admitBench(rounds = 15): Promise<AdmitResult> {
  const contenders = [reserveThree('3 × reserve', false), admitThree('admit of 3', false), reserveThree('3 × reserve + settle', true), admitThree('admit of 3 + settle', true)];
  const samples = await measure(contenders, { rounds, sampleMs: 50, warmupMs: 300 });
  const ns = Object.fromEntries([...samples].map(([name, values]) => [name, Math.round(median(values))]));
  return {
    ns,
    ratios: {
      admit: ratioMedian(samples.get('admit of 3'), samples.get('3 × reserve')),
      admitSettle: ratioMedian(samples.get('admit of 3 + settle'), samples.get('3 × reserve + settle')),
    },
    redis: await redisAdmitBench(),
  };
}

/** The two rows of issue 25's `admit` targets, as text and as RESULTS.md markdown. */
export function renderAdmit(result: AdmitResult): { text: string; markdown: string } {
  const { ns, ratios } = result;
  const rows = [
    ['operation', 'admit ns', '3 × reserve ns', 'ratio (target ≤ 1.2×)'],
    ['admit of 3 parts', formatNumber(ns['admit of 3'] ?? NaN), formatNumber(ns['3 × reserve'] ?? NaN), formatRatio(ratios.admit)],
    ['admit of 3 + settle', formatNumber(ns['admit of 3 + settle'] ?? NaN), formatNumber(ns['3 × reserve + settle'] ?? NaN), formatRatio(ratios.admitSettle)],
  ];
  const title = 'admit: three parts in memory beside three reserve calls';
  const about =
    'CPU ns per operation: requests per user (1024 users), requests per org (16 orgs) and 1000 tokens per org, each a KeyedRateLimiter of a TokenBucket that never refuses; admit of the three parts beside three reserve calls, and each settled (1, 1, 700) beside each reservation settled. 15 interleaved rounds; the ratio is the median of per-round ratios.';
  const redis = renderRedisAdmit(result.redis);
  return { text: `\n${title}\n${textTable(rows)}\n${redis.text}`, markdown: `\n## ${title}\n\n${about}\n\n${markdownTable(rows)}\n${redis.markdown}` };
}

function renderRedisAdmit({ version, rows: measured }: RedisAdmitResult): { text: string; markdown: string } {
  const rows = [
    ['admission of 3 parts', 'script calls', 'wall µs (one caller)', 'Redis CPU µs', 'Node CPU µs'],
    ...(['one script', 'in order'] as const).map((name) => {
      const { calls, wallUs, redisCpuUs, nodeCpuUs } = measured[name];
      return [name, formatNumber(calls, 2), formatNumber(wallUs, 1), formatNumber(redisCpuUs, 1), formatNumber(nodeCpuUs, 1)];
    }),
  ];
  const title = `admit over Redis ${version}, three parts: one script vs in order`;
  const about =
    "Per admission, medians of 7 interleaved rounds of 300 ms, on a redis-server of its own over one ioredis client: a token bucket per user (1024 users), a sliding window counter per org (16 orgs) and a fixed window of 1000 tokens per org, never refusing; one caller awaiting each admission. 'one script' is admit (its three parts in one atomic script); 'in order' the three reservations awaited one after another, which is what admit sends when the keys are in different Cluster slots (granted). Redis CPU is the server's used_cpu_user + used_cpu_sys delta ÷ admissions; script calls are EVALSHA calls ÷ admissions.";
  return { text: `\n${title}\n${textTable(rows)}\n`, markdown: `\n## ${title}\n\n${about}\n\n${markdownTable(rows)}\n` };
}

if (process.argv[1]?.endsWith('admit.ts')) {
  const result = await admitBench();
  if (process.send === undefined) console.log(renderAdmit(result).text, `(sink ${sunkValue() % 2})`);
  sendToParent(result);
}
