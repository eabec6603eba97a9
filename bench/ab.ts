// `npm run bench:ab -- <old tree> [new tree] [--only memory,redis,postgres] [--rounds 3]
// [--sample-ms 300]`: issue 24's performance targets, old code against new in one run. A tree is a
// checkout of ratekeeper (e.g. a `git worktree add --detach` of old main); the new tree defaults to
// this checkout. Both trees' sources are run through tsx, as every bench here runs src (no build
// needed; node_modules is this checkout's): their store code side by side in one process
// (bench/ab-stores.ts: one server, keys kept apart per tree), their in-memory limiters in a process
// per tree and algorithm (bench/ab-memory.ts), since two KeyedRateLimiter classes would make the
// timed loop polymorphic. Old and new alternate: in each round (3 unless `--rounds`, the issue's
// "median of three") every contender of both trees runs once, moments from its counterpart. Each
// figure is the median of the rounds and each new ÷ old the median of per-round ratios, printed
// with their range. Prints markdown; progress goes to stderr.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ALGORITHM_NAMES } from './algorithms';
import type { MemorySample } from './ab-memory';
import { AB_POSTGRES_CONTENDERS, AB_POSTGRES_IN_FLIGHT, AB_REDIS_IN_FLIGHT, AB_STORE_SAMPLE_MS, type AbPostgresResult, type AbRedisResult, type PostgresSample } from './ab-stores';
import { runChild } from './child';
import { REDIS_KEYS } from './redis';
import type { ArrivalSample } from './redis-arrivals';
import { machine } from './report';
import { formatNumber, formatRatio, markdownTable, median, ratioMedian } from './stats';

const PARTS = ['memory', 'redis', 'postgres'] as const;
type Part = (typeof PARTS)[number];

/** The targets: new ÷ old. */
const REDIS_CPU_MAX = 1.05;
const POSTGRES_MIN = 0.95;
const MEMORY_MAX = 1.05;
/** And new ÷ its peers at 64 in flight, as bench/RESULTS.md's Redis target rows read them (token bucket). */
const FLOOR_MIN = 1.5;
const RLF_MIN = 2;

interface Target {
  readonly target: string;
  readonly measured: string;
  readonly pass: boolean;
}

function usage(message: string): never {
  console.error(`bench/ab.ts: ${message}\nusage: npm run bench:ab -- <old tree> [new tree] [--only ${PARTS.join(',')}] [--rounds 3] [--sample-ms ${AB_STORE_SAMPLE_MS}]`);
  process.exit(2);
}

interface Options {
  readonly trees: [string, string];
  readonly parts: Part[];
  readonly rounds: number;
  /** One store sample, ms. */
  readonly sampleMs: number;
}

function parseArgs(args: readonly string[]): Options {
  const positional: string[] = [];
  let parts: Part[] = [...PARTS];
  let rounds = 3;
  let sampleMs = AB_STORE_SAMPLE_MS;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--only') {
      parts = (args[++i] ?? '').split(',') as Part[];
      const unknown = parts.filter((part) => !PARTS.includes(part));
      if (unknown.length > 0 || parts.length === 0) usage(`--only takes ${PARTS.join(', ')}, got ${args[i]}`);
    } else if (arg === '--rounds') {
      rounds = Number(args[++i]);
      if (!Number.isInteger(rounds) || rounds < 1) usage(`--rounds takes a whole number from 1, got ${args[i]}`);
    } else if (arg === '--sample-ms') {
      sampleMs = Number(args[++i]);
      if (!Number.isInteger(sampleMs) || sampleMs < 10) usage(`--sample-ms takes a whole number from 10, got ${args[i]}`);
    } else positional.push(arg);
  }
  if (positional.length < 1 || positional.length > 2) usage(`one or two trees, got ${positional.length}`);
  const here = fileURLToPath(new URL('..', import.meta.url));
  const trees = [resolve(positional[0]!), resolve(positional[1] ?? here)] as [string, string];
  for (const tree of trees) if (!existsSync(join(tree, 'src/index.ts'))) usage(`${tree} has no src/index.ts: not a ratekeeper checkout`);
  return { trees, parts, rounds, sampleMs };
}

/** The tree's commit, marked when its work tree differs from it. */
function describe(tree: string): string {
  try {
    return execFileSync('git', ['-C', tree, 'describe', '--always', '--dirty'], { encoding: 'utf8' }).trim();
  } catch {
    return 'not a git checkout';
  }
}

/** The median of per-round ratios and, in parentheses, their range: how far apart the rounds were. */
function ratioRange(a: readonly number[] | undefined, b: readonly number[] | undefined): string {
  const middle = ratioMedian(a, b);
  if (a === undefined || b === undefined || !Number.isFinite(middle)) return '—';
  const each = a.map((x, i) => x / b[i]!);
  return `${formatRatio(middle)} (${Math.min(...each).toFixed(2)}–${Math.max(...each).toFixed(2)})`;
}

const us = (value: number): string => formatNumber(value, value < 10 ? 2 : 1);
const verdict = (pass: boolean): string => (pass ? 'PASS' : 'MISS');
const geomean = (values: readonly number[]): number => Math.exp(values.reduce((sum, v) => sum + Math.log(v), 0) / values.length);

async function memory(trees: [string, string], rounds: number, step: (label: string) => void): Promise<{ markdown: string; targets: Target[] }> {
  const samples = Object.fromEntries(ALGORITHM_NAMES.map((a) => [a, { old: [] as MemorySample[], new: [] as MemorySample[] }]));
  for (let round = 0; round < rounds; round++) {
    for (const algorithm of ALGORITHM_NAMES) {
      // Which tree goes first alternates, so neither always runs right after the other's process.
      const order = round % 2 === 0 ? (['old', 'new'] as const) : (['new', 'old'] as const);
      for (const which of order) {
        step(`memory, round ${round + 1}: ${algorithm}, ${which}`);
        samples[algorithm]![which].push(await runChild<MemorySample>('./ab-memory.ts', [which === 'old' ? trees[0] : trees[1], algorithm]));
      }
    }
  }
  const rows: string[][] = [['algorithm', 'old ns/op', 'new ns/op', 'old ÷ floor', 'new ÷ floor', 'new ÷ old (÷ floor)', 'new ÷ old (ns/op)']];
  const ratios: number[] = [];
  const raw: number[] = [];
  // Per process: tryAcquire's median and its median ratio to the floor timed in the same rounds.
  const ns = (list: readonly MemorySample[]) => list.map((s) => median(s.ratekeeper));
  const normalized = (list: readonly MemorySample[]) => list.map((s) => ratioMedian(s.ratekeeper, s.floor));
  for (const algorithm of ALGORITHM_NAMES) {
    const { old, new: now } = samples[algorithm]!;
    const ratio = ratioMedian(normalized(now), normalized(old));
    const rawRatio = ratioMedian(ns(now), ns(old));
    ratios.push(ratio);
    raw.push(rawRatio);
    rows.push([algorithm, formatNumber(median(ns(old)), 1), formatNumber(median(ns(now)), 1), formatRatio(median(normalized(old))), formatRatio(median(normalized(now))), ratioRange(normalized(now), normalized(old)), ratioRange(ns(now), ns(old))]);
  }
  const mean = geomean(ratios);
  // Each round's geometric mean of the five, for the range the target is read with.
  const perRound = Array.from({ length: rounds }, (_, r) => geomean(ALGORITHM_NAMES.map((a) => normalized(samples[a]!.new)[r]! / normalized(samples[a]!.old)[r]!)));
  const meanText = `${formatRatio(mean)} (${Math.min(...perRound).toFixed(2)}–${Math.max(...perRound).toFixed(2)})`;
  rows.push(['geometric mean', '', '', '', '', meanText, formatRatio(geomean(raw))]);
  const markdown = [
    `## In memory: tryAcquire on one hot key (KeyedRateLimiter, systemClock), a process per tree and algorithm, ${rounds} rounds`,
    '',
    'CPU ns per decision, each process timing tryAcquire beside the floor (bench/contenders.ts) in 15 interleaved samples of 15 ms (bench/throughput.ts\'s hot key). "÷ floor" cancels what moves between processes (the neighbours\' load, the core a process lands on); the target reads new ÷ old of it.',
    '',
    markdownTable(rows),
  ].join('\n');
  return { markdown, targets: [{ target: `in-memory hot path, new ÷ old, geometric mean of the five ≤ ${formatRatio(MEMORY_MAX)}`, measured: meanText, pass: mean <= MEMORY_MAX }] };
}

function redisTables(result: AbRedisResult, { rounds, sampleMs }: Options): { markdown: string; targets: Target[] } {
  const field = (list: readonly ArrivalSample[] | undefined, key: keyof ArrivalSample) => (list ?? []).map((s) => s[key]);
  const targets: Target[] = [];
  const cpu: string[][] = [['algorithm', 'old Redis CPU µs/decision', 'new', 'new ÷ old', `≤ ${formatRatio(REDIS_CPU_MAX)}`, 'old Node CPU µs/decision', 'new', 'new ÷ old', 'old decisions per script call', 'new']];
  const speed: string[][] = [['contender', 'old decisions/s', 'new decisions/s', 'new ÷ old', 'old ÷ EVALSHA floor', 'new ÷ EVALSHA floor', 'old ÷ RLF', 'new ÷ RLF']];
  const perSecond = (list: readonly ArrivalSample[]) => field(list, 'perSecond');
  for (const label of ['floor', 'rlf'] as const) {
    const list = result[label];
    speed.push([label === 'floor' ? 'floor: bare EVALSHA (INCRBY + PEXPIRE)' : 'rate-limiter-flexible RateLimiterRedis', formatNumber(median(perSecond(list))), '', '', '', '', '', '']);
  }
  for (const algorithm of ALGORITHM_NAMES) {
    const old = result.trees.old[algorithm];
    const now = result.trees.new[algorithm];
    const serverRatio = ratioMedian(field(now, 'serverUs'), field(old, 'serverUs'));
    cpu.push([
      algorithm,
      us(median(field(old, 'serverUs'))),
      us(median(field(now, 'serverUs'))),
      ratioRange(field(now, 'serverUs'), field(old, 'serverUs')),
      verdict(serverRatio <= REDIS_CPU_MAX),
      us(median(field(old, 'clientUs'))),
      us(median(field(now, 'clientUs'))),
      ratioRange(field(now, 'clientUs'), field(old, 'clientUs')),
      formatNumber(median(field(old, 'perScript')), 1),
      formatNumber(median(field(now, 'perScript')), 1),
    ]);
    targets.push({ target: `Redis CPU per decision, ${algorithm}, new ÷ old ≤ ${formatRatio(REDIS_CPU_MAX)}`, measured: ratioRange(field(now, 'serverUs'), field(old, 'serverUs')), pass: serverRatio <= REDIS_CPU_MAX });
    const ratio = (list: readonly ArrivalSample[] | undefined, peer: readonly ArrivalSample[]) => ratioMedian(perSecond(list ?? []), perSecond(peer));
    const overFloor = ratio(now, result.floor);
    const overRlf = ratio(now, result.rlf);
    speed.push([
      `ratekeeper RedisRateLimiter ${algorithm}`,
      formatNumber(median(perSecond(old ?? []))),
      formatNumber(median(perSecond(now ?? []))),
      ratioRange(perSecond(now ?? []), perSecond(old ?? [])),
      formatRatio(ratio(old, result.floor)),
      formatRatio(overFloor),
      formatRatio(ratio(old, result.rlf)),
      formatRatio(overRlf),
    ]);
    if (algorithm === 'token-bucket') {
      targets.push({ target: `Redis, 64 in flight, token bucket: new ≥ ${formatRatio(FLOOR_MIN)} the bare EVALSHA`, measured: ratioRange(perSecond(now ?? []), perSecond(result.floor)), pass: overFloor >= FLOOR_MIN });
      targets.push({ target: `Redis, 64 in flight, token bucket: new ≥ ${formatRatio(RLF_MIN)} rate-limiter-flexible`, measured: ratioRange(perSecond(now ?? []), perSecond(result.rlf)), pass: overRlf >= RLF_MIN });
    }
  }
  const markdown = [
    `## Redis ${result.redisVersion}: one call per macrotask, ${AB_REDIS_IN_FLIGHT} in flight, one ioredis client, ${formatNumber(REDIS_KEYS)} keys in random order, ${rounds} rounds of ${sampleMs} ms`,
    '',
    'Both trees\' RedisRateLimiter in one process over one redis-server (bench/redis-arrivals.ts\'s sample): a fixed Rule, 3600 per hour (the sliding log 1000 per second, so that its logs keep a steady length). Redis CPU is the server\'s used_cpu_user + used_cpu_sys delta over the sample ÷ decisions; Node CPU is this process\'s, the arrival loop included. The floor and rate-limiter-flexible run in the same rounds; "÷ floor" and "÷ RLF" are medians of per-round ratios of decisions/s, as bench/RESULTS.md\'s Redis rows are.',
    '',
    markdownTable(cpu),
    '',
    markdownTable(speed),
  ].join('\n');
  return { markdown, targets };
}

function postgresTables(result: AbPostgresResult, { rounds, sampleMs }: Options): { markdown: string; targets: Target[] } {
  const rows: string[][] = [
    ['in flight', 'contender', 'old decisions/s', 'new decisions/s', 'new ÷ old', `≥ ${formatRatio(POSTGRES_MIN)}`, 'old server CPU µs/decision', 'new', 'new ÷ old', 'old Node CPU µs/decision', 'new', 'new ÷ old'],
  ];
  const targets: Target[] = [];
  const field = (list: readonly PostgresSample[] | undefined, key: keyof PostgresSample) => (list ?? []).map((s) => s[key]);
  for (const inFlight of AB_POSTGRES_IN_FLIGHT) {
    const level = result.levels[inFlight]!;
    const worst = { label: '', ratio: Infinity };
    for (const label of AB_POSTGRES_CONTENDERS) {
      const [old, now] = [level.old[label], level.new[label]];
      const ratio = ratioMedian(field(now, 'perSecond'), field(old, 'perSecond'));
      if (ratio < worst.ratio) Object.assign(worst, { label, ratio });
      rows.push([
        String(inFlight),
        label,
        formatNumber(median(field(old, 'perSecond'))),
        formatNumber(median(field(now, 'perSecond'))),
        ratioRange(field(now, 'perSecond'), field(old, 'perSecond')),
        verdict(ratio >= POSTGRES_MIN),
        us(median(field(old, 'serverUs'))),
        us(median(field(now, 'serverUs'))),
        ratioRange(field(now, 'serverUs'), field(old, 'serverUs')),
        us(median(field(old, 'clientUs'))),
        us(median(field(now, 'clientUs'))),
        ratioRange(field(now, 'clientUs'), field(old, 'clientUs')),
      ]);
    }
    targets.push({ target: `PostgreSQL decisions/s, ${inFlight} in flight, new ÷ old ≥ ${formatRatio(POSTGRES_MIN)} (worst contender)`, measured: `${formatRatio(worst.ratio)} (${worst.label})`, pass: worst.ratio >= POSTGRES_MIN });
  }
  const markdown = [
    `## ${result.server}: ${AB_POSTGRES_IN_FLIGHT.join(', ')} in flight, ${formatNumber(REDIS_KEYS)} keys in random order, ${rounds} rounds of ${sampleMs} ms per load`,
    '',
    'Both trees\' PostgresRateLimiter in one process over one server, a database per tree (each migrated by its own `migrate`), a pg Pool and a postgres.js client of 8 connections per tree (bench/stores.ts\'s sample); every key decided once before the rounds. Decisions/s is wall-clock and moves with the neighbours\' load; CPU per decision (the server\'s processes from /proc/<pid>/schedstat, and this process\'s) is the view that does not.',
    '',
    markdownTable(rows),
  ].join('\n');
  return { markdown, targets };
}

async function main(): Promise<void> {
  const options = parseArgs(process.argv.slice(2));
  const { trees, parts, rounds } = options;
  const childArgs = (store: string) => [store, trees[0], trees[1], String(rounds), String(options.sampleMs)];
  const started = performance.now();
  const before = machine();
  const step = (label: string) => console.error(`[ab ${((performance.now() - started) / 1000).toFixed(0).padStart(3)} s] ${label}`);
  const sections: string[] = [];
  const targets: Target[] = [];
  const add = (section: { markdown: string; targets: Target[] }) => {
    sections.push(section.markdown);
    targets.push(...section.targets);
  };
  if (parts.includes('redis')) {
    step('redis: both trees in one process');
    add(redisTables(await runChild<AbRedisResult>('./ab-stores.ts', childArgs('redis')), options));
  }
  if (parts.includes('postgres')) {
    step('postgres: both trees in one process');
    add(postgresTables(await runChild<AbPostgresResult>('./ab-stores.ts', childArgs('postgres')), options));
  }
  if (parts.includes('memory')) add(await memory(trees, rounds, step));
  const load = (values: readonly number[]) => values.map((v) => v.toFixed(2)).join(' ');
  console.log(
    [
      '# ratekeeper A/B: old tree against new',
      '',
      `- old: ${trees[0]} (${describe(trees[0])})`,
      `- new: ${trees[1]} (${describe(trees[1])})`,
      `- ${before.date}, Node ${before.node}, ${before.cpu} × ${before.cores}; load average before / after: ${load(before.loadAverage)} / ${load(machine().loadAverage)}; ${((performance.now() - started) / 1000).toFixed(0)} s`,
      '',
      '## Targets (issue 24)',
      '',
      'Every new ÷ old is the median of per-round ratios, with the range of the rounds in parentheses: with old and new at the same code, that range is the harness\'s noise.',
      '',
      markdownTable([['target', 'measured', 'result'], ...targets.map((t) => [t.target, t.measured, verdict(t.pass)])]),
      '',
      sections.join('\n\n'),
    ].join('\n'),
  );
}

await main();
