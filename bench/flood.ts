// Child process: ten million unique keys against `maxKeys: 100_000`. Measures the heap before and
// after (after GC), the CPU time of flood calls against steady calls on the same limiter, and checks
// that no active key is forgiven. Then newcomers against a table of blocked idle keys, one each
// millisecond (issue 23 item 4). Run by run.ts; alone, `node --expose-gc --import tsx bench/flood.ts`.
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../src/index';
import { epochNowMs } from './algorithms';
import { sendToParent } from './child';
import { formatNumber, formatRatio, markdownTable, median, textTable } from './stats';

export const FLOOD_KEYS = 10_000_000;
export const MAX_KEYS = 100_000;
/** Keys spent out before the flood, each with an exact twin: the ones an attacker wants forgiven. */
export const WATCHED_KEYS = 20_000;
/** Resident keys of ordinary traffic: the steady state the flood is compared with. */
export const STEADY_KEYS = 50_000;
/** Calls per timed chunk; flood and steady chunks alternate, so each ratio compares moments apart. */
const CHUNK = 100_000;
/** The clock moves 1 ms every this many calls. */
const CALLS_PER_MS = 100;

const WATCHED_RULE = new Rule(100, 86_400_000); // spent out: refills one permit per 14.4 min, so it stays active
const STEADY_RULE = Rule.perMinute(100); // two permits a visit: never full, so never idle, always resident
const FLOOD_RULE = Rule.perSecond(2); // one permit a key: idle again after 500 ms (50 000 calls)

/** Blocked keys: idle (full buckets) but blocked for a day, so no newcomer may take their place. */
export const BLOCKED_KEYS = 99_000;
/** Newcomers against the blocked table, one per ms; and calls on the resident keys (blocked and spent out) beside them. */
const BLOCKED_CHUNK = 2_000;
const BLOCKED_CHUNKS = 30;

export interface FloodResult {
  readonly floodKeys: number;
  readonly maxKeys: number;
  readonly watchedKeys: number;
  readonly steadyKeys: number;
  /** heapUsed + arrayBuffers after GC, in bytes: with the watched and steady keys resident, and after the flood. */
  readonly heapBefore: number;
  readonly heapAfter: number;
  /** The most keys resident at any chunk boundary. */
  readonly largestSize: number;
  readonly floodAdmitted: number;
  readonly floodRefusedTableFull: number;
  /** Median CPU ns per call over the chunks, and the median of per-pair ratios flood / steady. */
  readonly floodNsPerCall: number;
  readonly steadyNsPerCall: number;
  readonly ratio: number;
  /** Watched-key decisions compared with their twins, and how many differed (a forgiven key differs). */
  readonly watchedChecks: number;
  readonly forgiven: number;
  /** Watched keys still refused at the end of the flood. */
  readonly watchedStillRefused: number;
  /** Against a table of blocked idle keys: CPU ns per newcomer (each in a new ms) and per resident call, and the median per-pair ratio. */
  readonly blockedKeys: number;
  readonly blockedNewcomerNsPerCall: number;
  readonly blockedResidentNsPerCall: number;
  readonly blockedRatio: number;
  /** Newcomers refused key-table-full (all of them: no key may be reclaimed). */
  readonly blockedRefused: number;
  readonly seconds: number;
}

function heapBytes(): number {
  globalThis.gc?.();
  globalThis.gc?.();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

function cpuNs(run: () => void): number {
  const began = process.cpuUsage();
  run();
  const used = process.cpuUsage(began);
  return (used.user + used.system) * 1000;
}

/**
 * A full table of blocked idle keys and a few spent-out keys: each newcomer arrives in a new ms,
 * when every blocked key's bucket is full, and is timed beside calls on the resident keys. Blocked
 * keys were looked at again every ms (74-208 ms a newcomer with 100 000 of them); now at their
 * block's end.
 */
function blockedTable(): Pick<FloodResult, 'blockedKeys' | 'blockedNewcomerNsPerCall' | 'blockedResidentNsPerCall' | 'blockedRatio' | 'blockedRefused'> {
  const clock = new ManualClock(epochNowMs());
  const limiter = new KeyedRateLimiter({ algorithm: (key) => new TokenBucket(key.startsWith('w:') ? WATCHED_RULE : FLOOD_RULE), clock, maxKeys: MAX_KEYS });
  const resident = MAX_KEYS - BLOCKED_KEYS;
  for (let i = 0; i < BLOCKED_KEYS; i++) {
    limiter.tryAcquire(`b:${i}`);
    limiter.block(`b:${i}`, 86_400_000);
  }
  for (let i = 0; i < resident; i++) limiter.tryAcquire(`w:${i}`, WATCHED_RULE.limit);
  clock.advance(1000); // every blocked key's bucket is full again: idle, but blocked
  let next = 0;
  let refused = 0;
  let acc = 0;
  const newcomers = () => {
    for (let n = 0; n < BLOCKED_CHUNK; n++) {
      clock.advance(1);
      const decision = limiter.tryAcquire(`n:${next++}`);
      if (decision.degraded === 'key-table-full') refused++;
      acc += decision.remaining;
    }
  };
  // The resident calls visit the whole table (blocked keys and spent-out ones, all refused), as the
  // newcomers' lookups do: a newcomer misses in a table of 100 000 keys, and a call cycling over the
  // 1 000 spent-out keys alone would stay in cache (measured so: 6.5×, against a newcomer costing what
  // a flood call does).
  let visit = 0;
  const residents = () => {
    for (let n = 0; n < BLOCKED_CHUNK; n++) {
      const i = visit++ % MAX_KEYS;
      acc += limiter.tryAcquire(i < BLOCKED_KEYS ? `b:${i}` : `w:${i - BLOCKED_KEYS}`).remaining;
    }
  };
  newcomers(); // the first orders the table (one pass over it), the next look at each key once: not timed
  residents();
  refused = 0;
  const newcomerNs: number[] = [];
  const residentNs: number[] = [];
  for (let chunk = 0; chunk < BLOCKED_CHUNKS; chunk++) {
    if (chunk % 2 === 0) {
      newcomerNs.push(cpuNs(newcomers) / BLOCKED_CHUNK);
      residentNs.push(cpuNs(residents) / BLOCKED_CHUNK);
    } else {
      residentNs.push(cpuNs(residents) / BLOCKED_CHUNK);
      newcomerNs.push(cpuNs(newcomers) / BLOCKED_CHUNK);
    }
  }
  if (acc === -1) console.log('unreachable');
  return {
    blockedKeys: BLOCKED_KEYS,
    blockedNewcomerNsPerCall: median(newcomerNs),
    blockedResidentNsPerCall: median(residentNs),
    blockedRatio: median(newcomerNs.map((n, i) => n / (residentNs[i] as number))),
    blockedRefused: refused,
  };
}

function main(): FloodResult {
  const started = performance.now();
  const clock = new ManualClock(epochNowMs());
  const limiter = new KeyedRateLimiter({
    algorithm: (key) => new TokenBucket(key.startsWith('w:') ? WATCHED_RULE : key.startsWith('s:') ? STEADY_RULE : FLOOD_RULE),
    clock,
    maxKeys: MAX_KEYS,
  });
  const twins: TokenBucket[] = [];
  for (let i = 0; i < WATCHED_KEYS; i++) {
    limiter.tryAcquire(`w:${i}`, WATCHED_RULE.limit);
    const twin = new TokenBucket(WATCHED_RULE);
    twin.tryAcquire(clock.now(), WATCHED_RULE.limit);
    twins.push(twin);
  }
  for (let i = 0; i < STEADY_KEYS; i++) limiter.tryAcquire(`s:${i}`, 2);
  let watchedChecks = 0;
  let forgiven = 0;
  const check = (i: number) => {
    const key = `w:${i}`;
    const got = limiter.tryAcquire(key);
    const want = (twins[i] as TokenBucket).tryAcquire(clock.now());
    watchedChecks++;
    if (got.allowed !== want.allowed || got.remaining !== want.remaining || got.retryAfterMs !== want.retryAfterMs) forgiven++;
    return got;
  };

  const heapBefore = heapBytes();
  let calls = 0;
  let acc = 0;
  const tick = () => {
    if (++calls % CALLS_PER_MS === 0) clock.advance(1);
  };
  let floodNext = 0;
  let floodAdmitted = 0;
  let floodRefusedTableFull = 0;
  const flood = () => {
    for (let n = 0; n < CHUNK; n++) {
      const decision = limiter.tryAcquire(`f:${floodNext++}`);
      if (decision.allowed) floodAdmitted++;
      else if (decision.degraded === 'key-table-full') floodRefusedTableFull++;
      acc += decision.remaining;
      tick();
    }
  };
  let steadyNext = 0;
  const steady = () => {
    for (let n = 0; n < CHUNK; n++) {
      acc += limiter.tryAcquire(`s:${steadyNext++ % STEADY_KEYS}`, 2).remaining;
      tick();
    }
  };

  const floodNs: number[] = [];
  const steadyNs: number[] = [];
  let largestSize = limiter.size;
  for (let chunk = 0; floodNext < FLOOD_KEYS; chunk++) {
    // Alternate which goes first, so neither always runs right after a GC the other caused.
    if (chunk % 2 === 0) {
      floodNs.push(cpuNs(flood) / CHUNK);
      steadyNs.push(cpuNs(steady) / CHUNK);
    } else {
      steadyNs.push(cpuNs(steady) / CHUNK);
      floodNs.push(cpuNs(flood) / CHUNK);
    }
    largestSize = Math.max(largestSize, limiter.size);
    // Now and then, a sample of the watched keys must decide exactly as their twins.
    if (chunk % 10 === 9) for (let i = chunk % 97; i < WATCHED_KEYS; i += 97) check(i);
  }
  let watchedStillRefused = 0;
  for (let i = 0; i < WATCHED_KEYS; i++) if (!check(i).allowed) watchedStillRefused++;
  const heapAfter = heapBytes();
  if (acc === -1) console.log('unreachable');
  return {
    floodKeys: floodNext,
    maxKeys: MAX_KEYS,
    watchedKeys: WATCHED_KEYS,
    steadyKeys: STEADY_KEYS,
    heapBefore,
    heapAfter,
    largestSize,
    floodAdmitted,
    floodRefusedTableFull,
    floodNsPerCall: median(floodNs),
    steadyNsPerCall: median(steadyNs),
    ratio: median(floodNs.map((f, i) => f / (steadyNs[i] as number))),
    watchedChecks,
    forgiven,
    watchedStillRefused,
    ...blockedTable(),
    seconds: (performance.now() - started) / 1000,
  };
}

/** The flood's section of the report, as terminal text and as markdown for bench/RESULTS.md. */
export function renderFlood(r: FloodResult): { text: string; markdown: string } {
  const mb = (bytes: number) => `${formatNumber(bytes / 2 ** 20, 1)} MB`;
  const rows = [
    ['measure', 'value'],
    ['unique keys flooded', formatNumber(r.floodKeys)],
    ['maxKeys / most keys resident', `${formatNumber(r.maxKeys)} / ${formatNumber(r.largestSize)}`],
    ['heap before → after the flood (after GC)', `${mb(r.heapBefore)} → ${mb(r.heapAfter)} (${r.heapAfter >= r.heapBefore ? '+' : '−'}${mb(Math.abs(r.heapAfter - r.heapBefore))})`],
    ['flood keys admitted / refused (table full)', `${formatNumber(r.floodAdmitted)} / ${formatNumber(r.floodRefusedTableFull)}`],
    ['CPU ns per call: flood vs steady (median of chunks)', `${formatNumber(r.floodNsPerCall, 1)} vs ${formatNumber(r.steadyNsPerCall, 1)}`],
    ['flood / steady (median of per-pair ratios; target ≤ 3× with the bound kept)', `**${formatRatio(r.ratio)}** ${r.ratio <= 3 && r.largestSize <= r.maxKeys ? 'PASS' : 'MISS'}`],
    ['watched keys compared with exact twins / differing (forgiven)', `${formatNumber(r.watchedChecks)} / **${r.forgiven}** ${r.forgiven === 0 ? 'PASS' : 'FAIL'}`],
    ['watched keys still refused after the flood', `${formatNumber(r.watchedStillRefused)} of ${formatNumber(r.watchedKeys)}`],
    [`${formatNumber(r.blockedKeys)} blocked idle keys: CPU ns per newcomer (one per ms, all refused: ${formatNumber(r.blockedRefused)}) vs per resident call`, `${formatNumber(r.blockedNewcomerNsPerCall, 1)} vs ${formatNumber(r.blockedResidentNsPerCall, 1)}`],
    ['blocked idle keys: newcomer / resident call (median of per-pair ratios; target ≤ 3×)', `**${formatRatio(r.blockedRatio)}** ${r.blockedRatio <= 3 ? 'PASS' : 'MISS'}`],
    ['run time', `${formatNumber(r.seconds, 0)} s`],
  ];
  const title = `Flood: ${formatNumber(r.floodKeys)} unique keys against maxKeys ${formatNumber(r.maxKeys)}`;
  const note =
    `One KeyedRateLimiter (token buckets, ManualClock moving 1 ms per ${CALLS_PER_MS} calls) holds ${formatNumber(r.watchedKeys)} watched keys spent out ` +
    `(100 per day) and ${formatNumber(r.steadyKeys)} steady keys (100 per minute, 2 permits a visit). Chunks of ${formatNumber(CHUNK)} flood calls ` +
    '(each a new key, 2 per second) alternate with chunks of steady calls on the resident keys; each is timed in CPU time. ' +
    'Watched keys are checked against twin buckets every 10 chunks (a sample) and all at the end: any difference would be a forgiven key. ' +
    `Then a second limiter holds ${formatNumber(r.blockedKeys)} keys blocked for a day, their buckets full again (idle, but no newcomer may take their place), ` +
    `and ${formatNumber(r.maxKeys - r.blockedKeys)} spent-out keys: chunks of ${formatNumber(BLOCKED_CHUNK)} newcomers, each one ms after the last, alternate with chunks of calls cycling over every resident key, blocked and spent-out (the resident calls, all refused), after one untimed chunk of each.`;
  const markdown = `## ${title}\n\n${note}\n\n${markdownTable(rows)}\n`;
  const text = `\n== ${title}\n${textTable(rows.map((row) => row.map((cell) => cell.replace(/\*\*/g, ''))))}\n`;
  return { text, markdown };
}

if (process.argv[1]?.endsWith('flood.ts')) {
  const result = main();
  if (process.send === undefined) console.log(renderFlood(result).text);
  sendToParent(result);
}
