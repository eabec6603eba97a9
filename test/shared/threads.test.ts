// Races between real threads (Node worker_threads) on one SharedKeyedRateLimiter buffer, run on
// the built module (dist/shared.js, built by `npm test`). With the clock frozen nothing refills,
// so exactly `limit` permits exist: a lost update would show as more granted, a lost grant as fewer.
// A load-then-store control on the same kind of word must over-grant, or the race is not being
// exercised at all. Sizes are kept small: the machine may have two cores shared with others.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { SharedKeyedRateLimiter, type SharedAlgorithm } from '../../src/shared';
import { HANG_MS } from '../support/hang';

const WORKER = fileURLToPath(new URL('./fixtures/race-worker.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/shared.js', import.meta.url));

interface Reply {
  ready?: true;
  done?: unknown;
  error?: string;
}

/** A worker and a way to give it one job, resolved with what the job returned. */
class Thread {
  readonly worker = new Worker(WORKER);
  #listeners: ((reply: Reply) => void)[] = [];

  constructor() {
    this.worker.on('message', (reply: Reply) => this.#listeners.forEach((listener) => listener(reply)));
  }

  /** Posts a job; `ready` resolves when the worker waits at the gate, `done` with its result. */
  run<T>(job: Record<string, unknown>): { ready: Promise<void>; done: Promise<T> } {
    let onReady!: () => void;
    const ready = new Promise<void>((resolve) => (onReady = resolve));
    const done = new Promise<T>((resolve, reject) => {
      const listener = (reply: Reply) => {
        if (reply.ready) onReady();
        else {
          onReady(); // a job that failed before the gate must not hold the others there
          this.#listeners = this.#listeners.filter((l) => l !== listener);
          if (reply.error !== undefined) reject(new Error(reply.error));
          else resolve(reply.done as T);
        }
      };
      this.#listeners.push(listener);
    });
    this.worker.postMessage(job);
    return { ready, done };
  }
}

let pool: Thread[] = [];

beforeAll(() => {
  if (!existsSync(DIST)) throw new Error('dist/shared.js is missing: run `npx tsup` (npm test builds it first)');
  pool = Array.from({ length: 8 }, () => new Thread());
});

afterAll(async () => {
  await Promise.all(pool.map((thread) => thread.worker.terminate()));
});

/** Runs one job on `threads` workers at once (released together at a gate) and returns their results. */
async function together<T>(threads: number, job: (i: number) => Record<string, unknown>): Promise<T[]> {
  const gate = new SharedArrayBuffer(4);
  const runs = pool.slice(0, threads).map((thread, i) => thread.run<T>({ ...job(i), gate }));
  await Promise.all(runs.map((r) => r.ready));
  Atomics.store(new Int32Array(gate), 0, 1);
  Atomics.notify(new Int32Array(gate), 0);
  return Promise.all(runs.map((r) => r.done));
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

describe('threads racing for one key, clock frozen: exactly the limit is granted, never more', () => {
  const LIMIT = 20_000;
  const cases = [2, 4, 8].flatMap((threads) => [
    { threads, mixed: false },
    { threads, mixed: true },
  ]);

  it.each(cases)('token-bucket, $threads threads, mixed permits: $mixed (3 runs)', async ({ threads, mixed }) => {
    for (let run = 0; run < 3; run++) {
      const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: new Rule(LIMIT, 3_600_000), maxKeys: 16, clock: new ManualClock(1_000) });
      // Each thread alone could spend the whole limit: every run ends with the bucket drained.
      const attempts = Math.ceil((2 * LIMIT) / threads);
      const results = await together<{ granted: number }>(threads, (i) => ({ kind: 'race', buffer: limiter.buffer, key: 'last-token', attempts, mixed, seed: run * 97 + i + 1 }));
      const granted = sum(results.map((r) => r.granted));
      const left = limiter.peek('last-token').remaining;
      expect(granted + left, `run ${run}: granted ${granted}, ${left} left`).toBe(LIMIT);
      expect(granted).toBeLessThanOrEqual(LIMIT);
      if (!mixed) expect(left).toBe(0);
    }
  }, 30_000);

  it.each<SharedAlgorithm>(['leaky-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter'])(
    '%s, 4 threads, mixed permits',
    async (algorithm) => {
      const limit = 4000; // within the shared log's cap of 4095
      const limiter = new SharedKeyedRateLimiter({ algorithm, rule: new Rule(limit, 3_600_000), maxKeys: 16, clock: new ManualClock(1_000) });
      const results = await together<{ granted: number }>(4, (i) => ({ kind: 'race', buffer: limiter.buffer, key: 'k', attempts: limit, mixed: true, seed: i + 11 }));
      const granted = sum(results.map((r) => r.granted));
      expect(granted + limiter.peek('k').remaining).toBe(limit);
    },
    30_000,
  );

  it('the control: the same race with a load and a store instead of a CAS over-grants', async () => {
    const limit = 200_000;
    let worst = 0;
    for (let run = 0; run < 5 && worst <= limit; run++) {
      const word = new SharedArrayBuffer(8);
      const results = await together<{ granted: number }>(4, () => ({ kind: 'racy', word, attempts: limit, limit }));
      worst = Math.max(worst, sum(results.map((r) => r.granted)));
    }
    console.log(`load-then-store control: granted ${worst} of ${limit}`);
    expect(worst).toBeGreaterThan(limit);
  }, 30_000);
});

describe('the shared key table under threads', () => {
  it('threads racing to create the same new keys make exactly one slot per key', async () => {
    const keys = 300;
    for (const threads of [2, 4, 8]) {
      const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: new Rule(3, 3_600_000), maxKeys: 1000, clock: new ManualClock(1_000) });
      const results = await together<{ granted: number[]; degraded: number }>(threads, () => ({ kind: 'inserts', buffer: limiter.buffer, keys, tries: 3 }));
      expect(results.map((r) => r.degraded)).toEqual(Array(threads).fill(0));
      for (let k = 0; k < keys; k++) expect(sum(results.map((r) => r.granted[k] ?? 0)), `key new-${k}`).toBe(3);
      expect(limiter.size).toBe(keys);
      // Read the table itself: as many live slots as keys, no hash twice, no claim left pending.
      const words = new BigUint64Array(limiter.buffer);
      const live: bigint[] = [];
      for (let i = 16; i < words.length; i += 2) {
        const v = words[i] as bigint;
        if (v !== 0n) live.push(v);
      }
      expect(live.every((v) => v < 1n << 62n)).toBe(true);
      expect(new Set(live).size).toBe(keys);
      expect(live).toHaveLength(keys);
    }
  }, 30_000);

  it('keys given away as idle under a flood from 4 threads: no active key is ever forgiven', async () => {
    const clock = new SharedArrayBuffer(8); // [0]: the time every thread reads (thread 0 moves it); [1]: 1 = stop
    const time = new Int32Array(clock);
    // 10 per second: a flood key that took 1 permit is idle 100 ms later, so the 64 slots are given
    // away again and again; a watched key spent out at time 0 is active until it has refilled.
    const rule = Rule.perSecond(10);
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule, maxKeys: 64, clock: { now: () => Atomics.load(time, 0) } });
    const watched = 8;
    for (let j = 0; j < watched; j++) expect(limiter.tryAcquire(`watched-${j}`, 10).allowed).toBe(true);
    const results = await together<{ admitted: number; refused: number; differences: number; checks: number }>(4, (id) => ({
      kind: 'flood',
      buffer: limiter.buffer,
      clock,
      watched,
      rule: { limit: rule.limit, windowMs: rule.windowMs },
      until: 3000,
      id,
    }));
    const admitted = sum(results.map((r) => r.admitted));
    const checks = sum(results.map((r) => r.checks));
    console.log(`flood: ${admitted} new keys admitted into 64, ${sum(results.map((r) => r.refused))} refused as table-full, ${checks} watched decisions checked`);
    expect(checks).toBe(3000);
    expect(sum(results.map((r) => r.differences))).toBe(0);
    expect(admitted).toBeGreaterThan(64 * 4); // slots were given away again and again
    expect(limiter.size).toBeLessThanOrEqual(64);
  }, 30_000);

  it('worker.terminate() at random moments, 20 times: the survivors are never wedged', async () => {
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: new Rule(1_000_000_000, 1000), maxKeys: 2048 });
    for (let round = 0; round < 20; round++) {
      const victims = [new Thread(), new Thread()];
      const runs = victims.map((victim, i) => victim.run({ kind: 'hammer', buffer: limiter.buffer, prefix: `shared-${i}` }));
      await Promise.all(runs.map((r) => r.ready));
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 5));
      await Promise.all(victims.map((victim) => victim.worker.terminate()));
      // Every key the victims were working on, and the hot key, still decide normally. A call is
      // synchronous and the table takes no lock, so a wedge shows as a refusal or degraded answer
      // (checked) or as a spin: the test's timeout ends one that never returns, the hang guard a
      // round that returns only after seconds (a bound on speed failed under load).
      const started = performance.now();
      for (let i = 0; i < 512; i++) {
        for (const prefix of ['shared-0', 'shared-1']) {
          const decision = limiter.tryAcquire(`${prefix}-${i}`);
          expect(decision.allowed && decision.degraded === undefined, `${prefix}-${i} after round ${round}`).toBe(true);
        }
      }
      expect(limiter.tryAcquire('hot').allowed).toBe(true);
      expect(performance.now() - started, `round ${round}`).toBeLessThan(HANG_MS);
    }
    expect(limiter.size).toBe(1025);
  }, 60_000);
});
