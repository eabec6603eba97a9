// Child process: in-flight limits (issue 25, first target). N async no-op tasks launched at once
// through `lease` and `settle` on `Concurrency(2)`, beside the same tasks through p-limit(2) (the
// package, a devDependency pinned at 7.3.3). On one hot key, and on 10 000 keys against a Map of
// one p-limit per key.
// Run by run.ts; alone, `node --expose-gc --import tsx bench/in-flight.ts`.
import pLimit, { type LimitFunction } from 'p-limit';
import { Concurrency, KeyedRateLimiter } from '../src/index';
import { sendToParent } from './child';
import type { Contender, Workload } from './contenders';
import { measure } from './measure';
import { formatNumber, formatRatio, markdownTable, median, textTable } from './stats';
import { hotKeyWorkload, manyKeysWorkload } from './workloads';

const ROUNDS = 9;
const MANY_KEYS = 10_000;
const RATEKEEPER = 'ratekeeper lease/settle, Concurrency(2)';
const P_LIMIT = 'p-limit 7.3.3, pLimit(2)';

export interface InFlightResult {
  /** CPU ns per task per round, per workload and contender. */
  readonly hot: Record<string, number[]>;
  readonly many: Record<string, number[]>;
}

/** The task: an async no-op, as the target states it. */
const noop = async (): Promise<number> => 1;

/** `n` tasks launched at once, each on its key of the workload, through leases of one permit. */
function ratekeeper(workload: Workload): Contender {
  const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(2) });
  const { keys, order } = workload;
  const mask = order.length - 1;
  const task = async (key: string) => {
    const lease = await limiter.lease(key);
    try {
      return await noop();
    } finally {
      lease.settle(1);
    }
  };
  return {
    name: RATEKEEPER,
    async run(start, n) {
      const tasks = new Array<Promise<number>>(n);
      for (let i = 0; i < n; i++) tasks[i] = task(keys[order[(start + i) & mask] as number] as string);
      let acc = 0;
      for (const value of await Promise.all(tasks)) acc += value;
      return acc;
    },
  };
}

/** The same through one p-limit(2) per key, kept in a Map (one key: a single p-limit). */
function perKeyPLimit(workload: Workload): Contender {
  const limits = new Map<string, LimitFunction>();
  const { keys, order } = workload;
  const mask = order.length - 1;
  return {
    name: P_LIMIT,
    async run(start, n) {
      const tasks = new Array<Promise<number>>(n);
      for (let i = 0; i < n; i++) {
        const key = keys[order[(start + i) & mask] as number] as string;
        let limit = limits.get(key);
        if (limit === undefined) limits.set(key, (limit = pLimit(2)));
        tasks[i] = limit(noop);
      }
      let acc = 0;
      for (const value of await Promise.all(tasks)) acc += value;
      return acc;
    },
  };
}

async function row(workload: Workload): Promise<Record<string, number[]>> {
  const samples = await measure([ratekeeper(workload), perKeyPLimit(workload)], { rounds: ROUNDS, sampleMs: 40, warmupMs: 200, warmupOps: 2 * workload.keys.length });
  return Object.fromEntries(samples);
}

/** The table and the ratio, median of the per-round ratios. */
export function renderInFlight(result: InFlightResult): { text: string; markdown: string; ratios: { hot: number; many: number } } {
  const ratio = (samples: Record<string, number[]>) => median((samples[RATEKEEPER] ?? []).map((ns, i) => ns / (samples[P_LIMIT]?.[i] ?? NaN)));
  const ratios = { hot: ratio(result.hot), many: ratio(result.many) };
  const rows = [
    ['workload', 'ratekeeper ns/task', 'p-limit(2) ns/task', 'ratio (target ≤ 2×)'],
    ['one key', formatNumber(median(result.hot[RATEKEEPER] ?? []), 0), formatNumber(median(result.hot[P_LIMIT] ?? []), 0), formatRatio(ratios.hot)],
    [`${formatNumber(MANY_KEYS)} keys`, formatNumber(median(result.many[RATEKEEPER] ?? []), 0), formatNumber(median(result.many[P_LIMIT] ?? []), 0), formatRatio(ratios.many)],
  ];
  const title = 'In-flight limits: Concurrency(2) lease/settle beside p-limit(2)';
  const about =
    'CPU ns per task: N async no-op tasks launched at once (N sized to 40 ms a sample), each leasing one permit and settling it once its promise settles, beside the same tasks through p-limit(2) (on 10 000 keys, a Map of one p-limit per key); p-limit is the package, 7.3.3. 9 interleaved rounds; the ratio is the median of per-round ratios.';
  return { text: `\n${title}\n${textTable(rows)}\n`, markdown: `\n## ${title}\n\n${about}\n\n${markdownTable(rows)}\n`, ratios };
}

if (process.argv[1]?.endsWith('in-flight.ts')) {
  const result: InFlightResult = { hot: await row(hotKeyWorkload()), many: await row(manyKeysWorkload(MANY_KEYS)) };
  if (process.send === undefined) console.log(renderInFlight(result).text);
  sendToParent(result);
}
