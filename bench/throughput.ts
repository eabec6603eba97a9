// Child process: in-memory decisions per second for one algorithm, beside the floor and the peers,
// for one hot key and for 100 000 keys. One process per algorithm and variant keeps every call site
// monomorphic, as in an application that uses one algorithm. Run by run.ts; sends its samples.
import { systemClock, TokenBucket, type Clock, type Rule } from '../src/index';
import { ALGORITHMS, HOT_RULE, epochNowMs, isAlgorithmName, ruleFor, type AlgorithmName } from './algorithms';
import { sendToParent } from './child';
import { floor, limiterTokenBucket, rateLimiterFlexible, ratekeeper, ratekeeperPeek, type Contender, type Workload } from './contenders';
import { measure, sunkValue, type MeasureOptions } from './measure';
import { hotKeyWorkload, manyKeysWorkload, roundRobinWorkload } from './workloads';

export const MANY_KEYS = 100_000;

/**
 * `system` is the deliverable: ratekeeper with systemClock beside the floor and the peers. The other
 * variants (token bucket only) explain ratekeeper's cost. Each runs in its own process, because a
 * second clock type would make KeyedRateLimiter's call to `clock.now()` polymorphic for all.
 */
export const VARIANTS = ['system', 'bounded', 'counter-clock', 'churn'] as const;
export type Variant = (typeof VARIANTS)[number];

/**
 * hot: one key, HOT_RULE. random / roundRobin: 100 000 resident keys under MANY_RULE, visited in a
 * random order or in the order they were made. churn: 100 000 keys under HOT_RULE, so every key is
 * idle (its bucket full again) when it comes back, and ratekeeper reclaims and re-admits keys.
 */
export const SCENARIOS = ['hot', 'random', 'roundRobin', 'churn'] as const;
export type Scenario = (typeof SCENARIOS)[number];

export interface ThroughputResult {
  readonly algorithm: AlgorithmName;
  readonly variant: Variant;
  /** ns/op per round, per scenario measured, per contender name. */
  readonly scenarios: Partial<Record<Scenario, Record<string, number[]>>>;
  readonly sunk: number;
}

export const RATEKEEPER = 'ratekeeper';
export const RATEKEEPER_COUNTER_CLOCK = 'ratekeeper, counter clock (no time read)';
export const RATEKEEPER_BOUNDED = 'ratekeeper, maxKeys 200 000';
export const RATEKEEPER_PEEK = 'ratekeeper peek';
export const PERFORMANCE_NOW = 'performance.now() alone';
export const SYSTEM_CLOCK = 'systemClock.now() alone';
export const BARE_BUCKET = 'TokenBucket.tryAcquire(now) alone';

/** A clock that costs nothing to read: +1 ms per call, kept in a typed array so storing it allocates nothing. */
function counterClock(): Clock {
  const cell = new Float64Array([epochNowMs()]);
  return { now: () => ++cell[0]! };
}

function clockAlone(name: string, clock: Clock): Contender {
  return {
    name,
    run(_start, n) {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += clock.now();
      return acc;
    },
  };
}

function bareBucket(rule: Rule): Contender {
  const bucket = new TokenBucket(rule);
  const cell = new Float64Array([epochNowMs()]);
  return {
    name: BARE_BUCKET,
    run(_start, n) {
      let acc = 0;
      let now = cell[0]!;
      for (let i = 0; i < n; i++) acc += bucket.tryAcquire(++now).remaining;
      cell[0] = now;
      return acc;
    },
  };
}

/** The contenders of one scenario in one variant; none when the variant does not measure it. */
function contenders(algorithm: AlgorithmName, variant: Variant, scenario: Scenario, workload: () => Workload): Contender[] {
  const rule = scenario === 'churn' ? HOT_RULE : ruleFor(algorithm, scenario === 'hot');
  const make = () => ALGORITHMS[algorithm](rule);
  switch (variant) {
    case 'system': {
      if (scenario === 'churn') return [];
      const keys = workload();
      const list = [ratekeeper(RATEKEEPER, keys, make), floor(keys, rule), rateLimiterFlexible(keys, rule)];
      return scenario === 'hot' ? [...list, limiterTokenBucket(rule), ratekeeperPeek(RATEKEEPER_PEEK, keys, make)] : list;
    }
    case 'bounded': {
      // A bound sizes the key table's shards: 200 000 keys at most make 64 maps instead of 256.
      if (scenario === 'churn' || scenario === 'hot') return [];
      const keys = workload();
      return [ratekeeper(RATEKEEPER_BOUNDED, keys, make, systemClock, 2 * MANY_KEYS), floor(keys, rule)];
    }
    case 'counter-clock': {
      if (scenario === 'churn') return [];
      const keys = workload();
      const list = [ratekeeper(RATEKEEPER_COUNTER_CLOCK, keys, make, counterClock()), floor(keys, rule)];
      if (scenario !== 'hot') return list;
      return [...list, clockAlone(PERFORMANCE_NOW, { now: () => performance.now() }), clockAlone(SYSTEM_CLOCK, systemClock), bareBucket(rule)];
    }
    case 'churn': {
      if (scenario !== 'churn') return [];
      const keys = workload();
      return [ratekeeper(RATEKEEPER, keys, make), floor(keys, rule)];
    }
  }
}

export const THROUGHPUT_OPTIONS: MeasureOptions = { rounds: 15, sampleMs: 15, warmupMs: 150 };

async function main(): Promise<void> {
  const [algorithm, variant = 'system'] = process.argv.slice(2);
  if (!isAlgorithmName(algorithm)) throw new Error(`throughput.ts: unknown algorithm ${String(algorithm)}`);
  if (!(VARIANTS as readonly string[]).includes(variant)) throw new Error(`throughput.ts: unknown variant ${variant}`);
  const workloads: Record<Scenario, () => Workload> = {
    hot: hotKeyWorkload,
    random: () => manyKeysWorkload(MANY_KEYS),
    roundRobin: () => roundRobinWorkload(MANY_KEYS),
    churn: () => manyKeysWorkload(MANY_KEYS),
  };
  const scenarios: ThroughputResult['scenarios'] = {};
  for (const scenario of SCENARIOS) {
    const list = contenders(algorithm, variant as Variant, scenario, workloads[scenario]);
    // Two passes over the keys before timing, so every key is resident (and admitted once) first.
    const options = { ...THROUGHPUT_OPTIONS, warmupOps: scenario === 'hot' ? 0 : 2 * MANY_KEYS };
    if (list.length > 0) scenarios[scenario] = Object.fromEntries(await measure(list, options));
  }
  sendToParent({ algorithm, variant: variant as Variant, scenarios, sunk: sunkValue() } satisfies ThroughputResult);
}

if (process.argv[1]?.endsWith('throughput.ts')) await main();
