// Child process: ratekeeper/shared. First, decisions per second with 1, 2 and 4 worker threads on
// one hot key and on 100 000 keys, through one shared limiter, beside a KeyedRateLimiter per thread
// (no sharing: the upper bound) and a postMessage bridge to one KeyedRateLimiter on the main thread
// (what users hand-write today). Then the shared table used by one thread as an ordinary in-memory
// table at 100 000 and 1 000 000 random keys, beside KeyedRateLimiter and the Map floor.
// Run by run.ts; alone, `node --expose-gc --import tsx bench/shared.ts`.
import { MessageChannel, Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../src/index';
import { SharedKeyedRateLimiter } from '../src/shared/shared-keyed-rate-limiter';
import { HOT_RULE, MANY_RULE } from './algorithms';
import { sendToParent } from './child';
import { type Contender, FLOOR, floor, ratekeeper } from './contenders';
import { measure } from './measure';
import type { ThreadContender, ThreadSetup } from './shared-thread';
import { formatNumber, formatRatio, markdownTable, median, textTable } from './stats';
import { hotKeyWorkload, manyKeysWorkload } from './workloads';

const THREADS = [1, 2, 4] as const;
const CONTENDERS: readonly ThreadContender[] = ['shared', 'unshared', 'bridge', 'pipelined'];
const MANY_KEYS = 100_000;
const ROUNDS = 5;
const RUN_MS = 200;
const TABLE_KEYS = [100_000, 1_000_000] as const;
const SHARED_TABLE = 'SharedKeyedRateLimiter, one thread';
/**
 * The table's rule: 3600 a day, so that a key visited once per pass over a million keys (about a
 * second) is still active when it comes back and every table keeps all its keys (with 3600 an hour
 * they refill in a second, and KeyedRateLimiter would reclaim and re-admit them: another workload).
 */
const TABLE_RULE = new Rule(3600, 86_400_000);
const KEYED = 'KeyedRateLimiter';

export interface SharedResult {
  /** decisions/s per round: threads[scenario][threads][contender]. */
  readonly threads: Record<'hot' | 'many', Record<number, Record<ThreadContender, number[]>>>;
  /** ns/decision per round and bytes per key, per key count and contender. */
  readonly table: Record<number, { ns: Record<string, number[]>; bytesPerKey: Record<string, number> }>;
  /** One thread, one hot key, CPU ns/decision per round per contender: the same comparison as threads[hot][1], timed as the in-memory tables are. */
  readonly hot: Record<string, number[]>;
}

const boot = fileURLToPath(new URL('./thread-boot.mjs', import.meta.url));
const module = new URL('./shared-thread.ts', import.meta.url).href;

async function threadRows(hot: boolean): Promise<Record<number, Record<ThreadContender, number[]>>> {
  const out: Record<number, Record<ThreadContender, number[]>> = {};
  for (const n of THREADS) {
    const sets = new Map<ThreadContender, Worker[]>();
    const rule = hot ? HOT_RULE : MANY_RULE;
    const shared = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule, maxKeys: hot ? 16 : MANY_KEYS });
    const bridged = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) });
    for (const contender of CONTENDERS) {
      const workers: Worker[] = [];
      for (let i = 0; i < n; i++) {
        const setup: ThreadSetup = { module, contender, hot, keys: MANY_KEYS };
        let transfer: MessageChannel['port2'][] = [];
        if (contender === 'shared') Object.assign(setup, { buffer: shared.buffer });
        if (contender === 'bridge' || contender === 'pipelined') {
          const { port1, port2 } = new MessageChannel();
          port1.on('message', (key: string) => port1.postMessage(bridged.tryAcquire(key).remaining));
          Object.assign(setup, { port: port2 });
          transfer = [port2];
          workers.push(new Worker(boot, { workerData: setup, transferList: transfer }));
          continue;
        }
        workers.push(new Worker(boot, { workerData: setup }));
      }
      await Promise.all(workers.map((w) => once(w)));
      sets.set(contender, workers);
    }
    const runAll = async (workers: Worker[], ms: number) => {
      const counts = await Promise.all(workers.map((w) => ask(w, ms)));
      return (counts.reduce((a, b) => a + Math.abs(b), 0) * 1000) / ms;
    };
    for (const contender of CONTENDERS) await runAll(sets.get(contender) as Worker[], 300); // warm-up
    const samples = Object.fromEntries(CONTENDERS.map((c) => [c, [] as number[]])) as Record<ThreadContender, number[]>;
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < CONTENDERS.length; k++) {
        const contender = CONTENDERS[(round + k) % CONTENDERS.length] as ThreadContender;
        samples[contender].push(await runAll(sets.get(contender) as Worker[], RUN_MS));
      }
    }
    out[n] = samples;
    for (const workers of sets.values()) await Promise.all(workers.map((w) => w.terminate()));
  }
  return out;
}

function once(worker: Worker): Promise<unknown> {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

function ask(worker: Worker, ms: number): Promise<number> {
  const answer = once(worker) as Promise<number>;
  worker.postMessage(ms);
  return answer;
}

function sharedTable(keys: number, hot = false): Contender {
  const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: hot ? HOT_RULE : TABLE_RULE, maxKeys: keys });
  const { keys: names, order } = hot ? hotKeyWorkload() : manyKeysWorkload(keys);
  const mask = order.length - 1;
  return {
    name: SHARED_TABLE,
    run(start, n) {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += limiter.tryAcquire(names[order[(start + i) & mask] as number] as string).remaining;
      return acc;
    },
  };
}

function heapBytes(): number {
  globalThis.gc?.();
  globalThis.gc?.();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

/** Bytes retained per key by a structure holding `keys` keys, each decided once (key strings made inside, as a server's are). */
function bytesPerKey(keys: number, build: () => { tryAcquire(key: string): unknown; readonly size: number }): number {
  const before = heapBytes();
  const table = build();
  for (let i = 0; i < keys; i++) table.tryAcquire(`user:${i}`);
  if (table.size !== keys) throw new Error(`bench/shared.ts: a table kept ${table.size} of ${keys} keys`);
  const after = heapBytes();
  keep = table;
  keep = undefined;
  return (after - before) / keys;
}
let keep: unknown;

async function tableRows(): Promise<SharedResult['table']> {
  const out: SharedResult['table'] = {};
  for (const keys of TABLE_KEYS) {
    // Bytes first, while nothing else of this size is alive to be collected in the middle of a measurement.
    const floorTable = () => {
      const states = new Map<string, { tokens: number; at: number }>();
      return {
        tryAcquire(key: string) {
          const now = performance.now();
          const state = states.get(key);
          if (state === undefined) states.set(key, { tokens: TABLE_RULE.limit - 1, at: now });
          else state.tokens = Math.min(TABLE_RULE.limit, state.tokens + (now - state.at) * (TABLE_RULE.limit / TABLE_RULE.windowMs)) - 1;
        },
        get size() {
          return states.size;
        },
      };
    };
    const bytes = {
      [SHARED_TABLE]: bytesPerKey(keys, () => new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: TABLE_RULE, maxKeys: keys })),
      [KEYED]: bytesPerKey(keys, () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(TABLE_RULE), clock: new ManualClock(Date.now()) })),
      [FLOOR]: bytesPerKey(keys, floorTable),
    };
    const workload = manyKeysWorkload(keys);
    const contenders = [sharedTable(keys), ratekeeper(KEYED, workload, () => new TokenBucket(TABLE_RULE)), floor(workload, TABLE_RULE)];
    const ns = Object.fromEntries(await measure(contenders, { rounds: 9, sampleMs: 15, warmupMs: 150, warmupOps: 2 * keys }));
    out[keys] = { ns, bytesPerKey: bytes };
  }
  return out;
}

/** One hot key in one thread, CPU time: the wall-clock thread rows suffer most from a loaded machine. */
async function hotRows(): Promise<SharedResult['hot']> {
  const workload = hotKeyWorkload();
  const contenders = [sharedTable(16, true), ratekeeper(KEYED, workload, () => new TokenBucket(HOT_RULE)), floor(workload, HOT_RULE)];
  return Object.fromEntries(await measure(contenders, { rounds: 15, sampleMs: 15, warmupMs: 150 }));
}

async function main(): Promise<void> {
  const hot = await hotRows();
  const threads = { hot: await threadRows(true), many: await threadRows(false) };
  const table = await tableRows();
  sendToParent({ threads, table, hot } satisfies SharedResult);
}

/** The median of per-round ratios a[i] / b[i]. */
function ratio(a: readonly number[] | undefined, b: readonly number[] | undefined): number {
  if (a === undefined || b === undefined || a.length !== b.length || a.length === 0) return NaN;
  return median(a.map((x, i) => x / (b[i] as number)));
}

const perSecond = (samples: readonly number[] | undefined) => (samples === undefined ? '—' : `${formatNumber(median(samples) / 1e6, 2)} M`);

/** The tables and targets of the shared limiter, for the console and bench/RESULTS.md. */
export function renderShared(result: SharedResult): { text: string; markdown: string } {
  const threadTable = (scenario: 'hot' | 'many') => {
    const rows = [['threads', 'shared decisions/s', 'unshared (a limiter per thread)', 'bridge, each call awaited', 'bridge, 64 in flight', 'unshared ÷ shared', 'shared ÷ bridge', 'shared ÷ 64 in flight']];
    for (const n of THREADS) {
      const s = result.threads[scenario][n];
      rows.push([
        String(n),
        perSecond(s?.shared),
        perSecond(s?.unshared),
        perSecond(s?.bridge),
        perSecond(s?.pipelined),
        formatRatio(ratio(s?.unshared, s?.shared)),
        formatRatio(ratio(s?.shared, s?.bridge)),
        formatRatio(ratio(s?.shared, s?.pipelined)),
      ]);
    }
    return rows;
  };
  const tableRowsOut = [['keys', 'contender', 'ns/decision', '÷ Map floor', 'bytes per key']];
  for (const keys of TABLE_KEYS) {
    const t = result.table[keys];
    for (const name of [SHARED_TABLE, KEYED, FLOOR]) {
      tableRowsOut.push([formatNumber(keys), name, formatNumber(median(t?.ns[name] ?? [NaN]), 1), formatRatio(ratio(t?.ns[name], t?.ns[FLOOR])), formatNumber(t?.bytesPerKey[name] ?? NaN, 1)]);
    }
  }
  const hot1 = result.threads.hot[1];
  const slower = ratio(hot1?.unshared, hot1?.shared);
  const slowerCpu = ratio(result.hot[SHARED_TABLE], result.hot[KEYED]);
  const vsBridge = ratio(hot1?.shared, hot1?.bridge);
  const vsPipelined = ratio(hot1?.shared, hot1?.pipelined);
  const targets = [
    ['target (issue 16)', 'measured', 'result'],
    [
      'one thread, hot key: within 2× the unshared limiter (CPU time, in-process rounds)',
      `${formatRatio(slowerCpu)} (${formatNumber(median(result.hot[SHARED_TABLE] ?? [NaN]), 1)} vs ${formatNumber(median(result.hot[KEYED] ?? [NaN]), 1)} ns; floor ${formatNumber(median(result.hot[FLOOR] ?? [NaN]), 1)} ns)`,
      slowerCpu <= 2 ? 'PASS' : 'MISS',
    ],
    ['the same in a worker thread (wall clock, below)', `${formatRatio(slower)} (unshared ÷ shared)`, slower <= 2 ? 'PASS' : 'MISS'],
    ['one thread, hot key: ≥ 20× the postMessage bridge (each call awaited)', formatRatio(vsBridge), vsBridge >= 20 ? 'PASS' : 'MISS'],
    ['(the same against a bridge with 64 calls in flight, its best case)', formatRatio(vsPipelined), vsPipelined >= 20 ? 'PASS' : 'MISS'],
  ];
  const title = (s: string) => ({ text: `\n${s}\n`, markdown: `\n## ${s}\n` });
  const intro =
    'Wall-clock decisions per second summed over the worker threads (token bucket, systemClock; the hot key 10^9/s, the 100 000 keys 3600/h in random order), ' +
    `${ROUNDS} interleaved rounds of ${RUN_MS} ms after a 300 ms warm-up, median; ratios are medians of per-round ratios. ` +
    'The bridge is a MessagePort per worker to one KeyedRateLimiter on the main thread: either each call awaits its answer before the next (a handler awaiting its limiter), or 64 are kept in flight per worker (its best case). 4 threads oversubscribe a 2-core machine.';
  const parts: [string, string[][], string?][] = [
    ['Shared by threads: targets', targets],
    ['Shared by threads: one hot key', threadTable('hot'), intro],
    ['Shared by threads: 100 000 keys in random order', threadTable('many')],
    [
      'The shared table as an in-memory table (one thread, random keys)',
      tableRowsOut,
      'CPU ns per decision (token bucket, 3600 a day so that every key stays resident, systemClock) measured as the in-memory tables are; bytes per key are heap + array buffers after GC over keys, key strings included where a structure keeps them (the shared table keeps a 62-bit hash, not the key).',
    ],
  ];
  let text = '';
  let markdown = '';
  for (const [name, rows, note] of parts) {
    const t = title(name);
    text += t.text + (note === undefined ? '' : `${note}\n`) + textTable(rows);
    markdown += `${t.markdown}\n${note === undefined ? '' : `${note}\n\n`}${markdownTable(rows)}\n`;
  }
  return { text, markdown };
}

if (process.argv[1]?.endsWith('shared.ts')) await main();
