// Child process: heap bytes per resident key (200 000 keys, after GC) for every algorithm, beside the
// floor's Map and rate-limiter-flexible; and the sliding log's bytes per stored grant. Run by run.ts.
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { KeyedRateLimiter, ManualClock, Rule } from '../src/index';
import { ALGORITHM_NAMES, ALGORITHMS, MANY_RULE, epochNowMs, type AlgorithmName } from './algorithms';
import { sendToParent } from './child';
import { type FloorState, floorDecide } from './contenders';

export const HEAP_KEYS = 200_000;
/** Keys and grants per key of the full-log measurement: every log holds `FULL_LOG_HITS` grants, a ms apart. */
export const FULL_LOG_KEYS = 20_000;
export const FULL_LOG_HITS = 100;

export interface HeapRow {
  readonly name: string;
  readonly keys: number;
  /** (heapUsed + arrayBuffers) after minus before, over keys, one figure per trial. */
  readonly bytesPerKey: number[];
}

export interface HeapResult {
  readonly rows: HeapRow[];
}

const collect = (): void => {
  globalThis.gc?.();
  globalThis.gc?.();
};

function heapBytes(): number {
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

/**
 * Bytes a structure built by `build` retains per key, the key strings included (they are made
 * inside the measurement, as a server's request keys are, and the structure keeps them alive).
 */
async function perKey(keys: number, build: (keys: number) => unknown): Promise<number> {
  collect();
  const before = heapBytes();
  const retained = await build(keys);
  collect();
  const after = heapBytes();
  keepAlive(retained);
  return (after - before) / keys;
}

let kept: unknown;
function keepAlive(value: unknown): void {
  kept = value;
  kept = undefined;
}

/** Each key made as a server makes it: a fresh string per request. */
function keyOf(i: number): string {
  return `user:${i}`;
}

function keyStrings(keys: number): string[] {
  const list: string[] = [];
  for (let i = 0; i < keys; i++) list.push(keyOf(i));
  return list;
}

function ratekeeper(algorithm: AlgorithmName, rule: Rule, hitsPerKey: number) {
  return (keys: number) => {
    // A clock reading like systemClock's (about 1.7e12): stored times are then doubles, as in production.
    const clock = new ManualClock(epochNowMs());
    const limiter = new KeyedRateLimiter({ algorithm: () => ALGORITHMS[algorithm](rule), clock });
    for (let i = 0; i < keys; i++) {
      const key = keyOf(i);
      // A ms apart: the sliding log keeps hits at one reading in one entry.
      for (let h = 0; h < hitsPerKey; h++) {
        if (h > 0) clock.advance(1);
        limiter.tryAcquire(key);
      }
    }
    if (limiter.size !== keys) throw new Error(`heap.ts: ${algorithm} kept ${limiter.size} of ${keys} keys`);
    return limiter;
  };
}

/**
 * The floor's states as they are in service: every key decided twice, by the floor's own arithmetic
 * (bench/contenders.ts). Decided once, at the instant it was made (as this row first was), a key had
 * refilled nothing, so `tokens` stayed a small integer held in the object itself. From its first
 * refill on, `tokens` is fractional and V8 keeps it in a 16-byte HeapNumber, for every key (a field's
 * representation belongs to the shape all the keys share). ratekeeper's states keep their size:
 * on an integer clock its token count stays an integer.
 *
 * The second decision follows the first at once. Visiting all the keys once and then again would let
 * a slow machine (more than a second between a key's visits) refill each bucket to its cap, an
 * integer again: the floor then measured 14.5 bytes less per key on a busy machine than on a quiet one.
 */
function floorMap(keys: number) {
  const states = new Map<string, FloorState>();
  const capacity = MANY_RULE.limit;
  const perMs = MANY_RULE.limit / MANY_RULE.windowMs;
  for (let i = 0; i < keys; i++) {
    floorDecide(states, keyOf(i), capacity, perMs);
    floorDecide(states, keyOf(i), capacity, perMs);
  }
  return states;
}

async function rateLimiterFlexible(keys: number) {
  const limiter = new RateLimiterMemory({ points: MANY_RULE.limit, duration: MANY_RULE.windowMs / 1000 });
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < keys; i++) {
    pending.push(limiter.consume(keyOf(i)));
    if (pending.length === 1024) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  return limiter;
}

export const FLOOR_ROW = "floor: Map<string, {tokens, at}>";
export const RLF_ROW = 'rate-limiter-flexible Memory';
export const KEY_STRINGS_ROW = 'key strings alone (`user:<i>`, in an array)';
export const FULL_LOG_ROW = `sliding-window-log, ${FULL_LOG_HITS} grants per key`;
export const ONE_HIT_LOG_ROW = `sliding-window-log, 1 grant per key (same rule)`;
export const TRIALS = 3;

async function main(): Promise<void> {
  const fullLogRule = new Rule(FULL_LOG_HITS, 3_600_000);
  const plan: [string, number, (keys: number) => unknown][] = [
    [KEY_STRINGS_ROW, HEAP_KEYS, keyStrings],
    [FLOOR_ROW, HEAP_KEYS, floorMap],
    [RLF_ROW, HEAP_KEYS, rateLimiterFlexible],
    ...ALGORITHM_NAMES.map((name): [string, number, (keys: number) => unknown] => [name, HEAP_KEYS, ratekeeper(name, MANY_RULE, 1)]),
    [ONE_HIT_LOG_ROW, FULL_LOG_KEYS, ratekeeper('sliding-window-log', fullLogRule, 1)],
    [FULL_LOG_ROW, FULL_LOG_KEYS, ratekeeper('sliding-window-log', fullLogRule, FULL_LOG_HITS)],
  ];
  // Warm-up: load and compile everything once, so one-time allocations are not billed to a row.
  for (const [, , build] of plan) await build(256);
  const rows: HeapRow[] = plan.map(([name, keys]) => ({ name, keys, bytesPerKey: [] }));
  for (let trial = 0; trial < TRIALS; trial++) {
    for (const [index, [, keys, build]] of plan.entries()) rows[index]!.bytesPerKey.push(await perKey(keys, build));
  }
  sendToParent({ rows } satisfies HeapResult);
}

if (process.argv[1]?.endsWith('heap.ts')) await main();
