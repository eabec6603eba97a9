import { setImmediate as tick } from 'node:timers/promises';
import type { Contender } from './contenders';

export interface MeasureOptions {
  /** Interleaved rounds; every contender is timed once per round, so ratios come from the same moments. */
  readonly rounds: number;
  /** CPU time of one timed sample. */
  readonly sampleMs: number;
  /** CPU time of untimed running before the first round, after calibration. */
  readonly warmupMs: number;
  /**
   * Operations the calibration and warm-up run at least, whatever their time: two passes over a
   * workload's keys, so that no timed round admits a key for the first time. @default 0
   */
  readonly warmupOps?: number;
}

/** ns per operation of every contender in every round: `result.get(name)[round]`. */
export type RoundSamples = Map<string, number[]>;

const gc: () => void = typeof globalThis.gc === 'function' ? globalThis.gc : () => {};

/**
 * CPU time (ns, user + system, this process) of `n` decisions. CPU rather than wall time: on these
 * shared 2-core machines the process is often descheduled for whole milliseconds by other
 * engineers' test suites, and wall time would bill that to whichever contender was running.
 */
async function timeRun(contender: Contender, start: number, n: number): Promise<number> {
  const began = process.cpuUsage();
  const acc = await contender.run(start, n);
  const used = process.cpuUsage(began);
  sink(acc);
  return (used.user + used.system) * 1000;
}

let sunk = 0;
/** Keeps every accumulator alive, so no loop's work can be optimized away. */
function sink(value: number): void {
  sunk = (sunk + value) % 1e15;
}
export function sunkValue(): number {
  return sunk;
}

/**
 * Times contenders in interleaved rounds (the order rotates each round), after calibrating each to
 * `sampleMs` per sample and warming it up. Samples are short and many, so that the neighbours' noise
 * on a shared host hits contenders alike and a per-round ratio compares moments a few ms apart. One
 * full GC runs before calibration and none during the rounds: a forced mark-compact moves the
 * 100 000 states out of allocation order, and each one made the next samples slower (measured:
 * the floor drifted from ~150 to over 1000 ns/op after ten forced GCs). Each contender's own
 * minor GCs stay on its clock.
 */
export async function measure(contenders: readonly Contender[], options: MeasureOptions): Promise<RoundSamples> {
  gc();
  const sizes = new Map<Contender, number>();
  const positions = new Map<Contender, number>();
  for (const contender of contenders) {
    let n = 1024;
    let position = 0;
    let elapsedNs = 0;
    for (;;) {
      elapsedNs = await timeRun(contender, position, n);
      position += n;
      if (elapsedNs >= 10e6 || n >= 1 << 26) break;
      n *= 2;
    }
    let nsPerOp = elapsedNs / n;
    let warmedNs = 0;
    const chunk = Math.max(1024, Math.round(10e6 / nsPerOp));
    while (warmedNs < options.warmupMs * 1e6 || position < (options.warmupOps ?? 0)) {
      const chunkNs = await timeRun(contender, position, chunk);
      warmedNs += chunkNs;
      position += chunk;
      nsPerOp = chunkNs / chunk;
    }
    // Sized by the last warm-up chunk, not by the calibration: the first calls of a keyed limiter
    // run before the JIT has compiled them and admit every key for the first time (7-19 us/op).
    // Sized by those, ratekeeper's 100 000-key samples were ~800 calls against the floor's ~39 000,
    // and its 150 ms warm-up ended before every key was admitted, so timed rounds admitted keys
    // and ratekeeper measured 1.9-2.8x the floor instead of 1.1-1.4x (random order).
    sizes.set(contender, Math.max(1024, Math.round((options.sampleMs * 1e6) / nsPerOp)));
    positions.set(contender, position);
  }
  const samples: RoundSamples = new Map(contenders.map((c) => [c.name, []]));
  for (let round = 0; round < options.rounds; round++) {
    await tick();
    for (let k = 0; k < contenders.length; k++) {
      const contender = contenders[(round + k) % contenders.length] as Contender;
      const n = sizes.get(contender) as number;
      const position = positions.get(contender) as number;
      const elapsedNs = await timeRun(contender, position, n);
      positions.set(contender, position + n);
      samples.get(contender.name)?.push(elapsedNs / n);
    }
  }
  return samples;
}
