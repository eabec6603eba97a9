// Child process of bench/ab.ts: one tree's in-memory hot path for one algorithm. `tryAcquire` on one
// hot key of a KeyedRateLimiter (systemClock) imported from `<tree>/src/index.ts`, timed beside the
// floor in interleaved rounds as bench/throughput.ts times its hot key. A process per tree and per
// algorithm, because two trees' KeyedRateLimiter classes in one process would make the loop's call
// site polymorphic, a cost the application (one class, one algorithm) never pays.
// `node --import tsx bench/ab-memory.ts <tree> <algorithm>` prints the result as JSON.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { isAlgorithmName, type AlgorithmName } from './algorithms';
import { sendToParent } from './child';
import { FLOOR, floor, tryAcquireLoop, type TryAcquire } from './contenders';
import { measure } from './measure';
import { THROUGHPUT_OPTIONS } from './throughput';
import { hotKeyWorkload } from './workloads';

export const AB_RATEKEEPER = 'ratekeeper';

export interface MemorySample {
  /** CPU ns per tryAcquire, per round of this process. */
  readonly ratekeeper: number[];
  /** CPU ns per decision of the floor, in the same rounds. */
  readonly floor: number[];
}

/** What this child needs of a tree's src/index.ts: typed loosely, as two trees' types differ. */
interface TreeIndex {
  readonly KeyedRateLimiter: new (options: { algorithm: () => unknown; clock: unknown }) => TryAcquire;
  readonly Rule: new (limit: number, windowMs: number) => { readonly limit: number; readonly windowMs: number };
  readonly systemClock: unknown;
  readonly [algorithmClass: string]: unknown;
}

const CLASSES: Record<AlgorithmName, string> = {
  'token-bucket': 'TokenBucket',
  'leaky-bucket': 'LeakyBucket',
  'fixed-window': 'FixedWindow',
  'sliding-window-log': 'SlidingWindowLog',
  'sliding-window-counter': 'SlidingWindowCounter',
};

async function main(): Promise<void> {
  const [tree, algorithm] = process.argv.slice(2);
  if (tree === undefined || !isAlgorithmName(algorithm)) throw new Error(`ab-memory.ts: usage: <tree> <algorithm>, got ${process.argv.slice(2).join(' ')}`);
  const index = (await import(pathToFileURL(join(tree, 'src/index.ts')).href)) as TreeIndex;
  // The rules of bench/algorithms.ts's ruleFor(algorithm, hot), made by the tree's own Rule.
  const rule = algorithm === 'sliding-window-log' ? new index.Rule(1_000_000, 1) : new index.Rule(1_000_000_000, 1000);
  const Algorithm = index[CLASSES[algorithm]] as new (rule: unknown) => unknown;
  const workload = hotKeyWorkload();
  const limiter = new index.KeyedRateLimiter({ algorithm: () => new Algorithm(rule), clock: index.systemClock });
  const samples = await measure([tryAcquireLoop(AB_RATEKEEPER, workload, limiter), floor(workload, rule)], THROUGHPUT_OPTIONS);
  sendToParent({ ratekeeper: samples.get(AB_RATEKEEPER)!, floor: samples.get(FLOOR)! } satisfies MemorySample);
}

if (process.argv[1]?.endsWith('ab-memory.ts')) await main();
