// src/limiter/wait-queue.ts (and its wait-line.ts) over an asynchronous limiter, and
// src/limiter/manual-scheduler.ts.
import { describe, expect, it } from 'vitest';
import { ManualScheduler, Rule, TokenBucket, WaitQueue, type Decision } from '../../src/index';
import { rangeError, typeError } from '../../src/core/errors';

// The waiting machinery on its own, over a limiter that answers asynchronously as a store does,
// and the manual scheduler the tests drive it with.

/** A token bucket behind a store round trip (a few promise hops, which advanceAsync lets finish). */
function storeOf(scheduler: ManualScheduler, limit: number, windowMs: number) {
  const bucket = new TokenBucket(new Rule(limit, windowMs));
  const spent: number[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const tryAcquire = async (_key: string, permits: number): Promise<Decision> => {
    inFlight++;
    mostInFlight = Math.max(mostInFlight, inFlight);
    for (let hop = 0; hop < 3; hop++) await Promise.resolve();
    inFlight--;
    const decision = bucket.tryAcquire(scheduler.now(), permits);
    if (decision.allowed) spent.push(permits);
    return decision;
  };
  return { tryAcquire, spent, mostInFlight: () => mostInFlight };
}

describe('WaitQueue over an asynchronous limiter', () => {
  it('serves callers first come, first served, asking the store for one caller at a time', async () => {
    const scheduler = new ManualScheduler();
    const store = storeOf(scheduler, 2, 1000);
    const queue = new WaitQueue(store.tryAcquire, scheduler);
    const granted: [number, number][] = [];
    const all = [2, 1, 2, 1].map((permits, i) => queue.acquire('k', permits).then(() => granted.push([i, scheduler.now()])));
    await scheduler.advanceAsync(3000);
    await Promise.all(all);
    expect(granted).toEqual([
      [0, 0],
      [1, 500],
      [2, 1500],
      [3, 2000],
    ]);
    expect(store.mostInFlight()).toBe(1);
    expect(scheduler.pending).toBe(0);
    expect(queue.has('k')).toBe(false);
  });

  it('rejects at once on an abort while the store decides; a grant that lands after it stays spent', async () => {
    const scheduler = new ManualScheduler();
    const store = storeOf(scheduler, 1, 1000);
    const queue = new WaitQueue(store.tryAcquire, scheduler);
    const controller = new AbortController();
    const first = queue.acquire('k', 1, { signal: controller.signal });
    const second = queue.acquire('k');
    controller.abort('gone');
    await expect(first).rejects.toBe('gone');
    await scheduler.advanceAsync(1000);
    expect(await second).toMatchObject({ allowed: true });
    expect(store.spent).toEqual([1, 1]); // the store cannot be asked to take the first back
  });

  it('passes a store error to the caller it was for, and carries on with the next', async () => {
    const scheduler = new ManualScheduler();
    let calls = 0;
    const queue = new WaitQueue(async () => {
      calls++;
      if (calls === 1) throw new Error('connection reset');
      return { allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0 } as const;
    }, scheduler);
    const first = queue.acquire('k');
    const second = queue.acquire('k');
    await expect(first).rejects.toThrow('connection reset');
    expect(await second).toMatchObject({ allowed: true });
  });

  it('refuses a bad attempt function', () => {
    expect(() => new WaitQueue('tryAcquire' as never)).toThrow(typeError('ratekeeper: `attempt` must be a function, got "tryAcquire"'));
  });
});

describe('ManualScheduler', () => {
  it('fires due timers in time order, the earliest set first on a tie, each at its own time', () => {
    const scheduler = new ManualScheduler(100);
    const fired: string[] = [];
    const note = (name: string) => () => fired.push(`${name}@${scheduler.now()}`);
    scheduler.setTimeout(note('c'), 30);
    scheduler.setTimeout(note('a'), 10);
    const cancelled = scheduler.setTimeout(note('x'), 10);
    scheduler.setTimeout(() => {
      note('b')();
      scheduler.setTimeout(note('b2'), 5);
    }, 10);
    scheduler.clearTimeout(cancelled);
    expect(scheduler.pending).toBe(3);
    expect(scheduler.advance(20)).toBe(120);
    expect(fired).toEqual(['a@110', 'b@110', 'b2@115']);
    scheduler.advance(100);
    expect(fired).toEqual(['a@110', 'b@110', 'b2@115', 'c@130']);
    expect(scheduler.now()).toBe(220);
    expect(scheduler.pending).toBe(0);
  });

  it('lets promise callbacks run between timers with advanceAsync', async () => {
    const scheduler = new ManualScheduler();
    const seen: number[] = [];
    const loop = async () => {
      for (let i = 0; i < 3; i++) {
        await new Promise<void>((resolve) => scheduler.setTimeout(resolve, 100));
        seen.push(scheduler.now());
      }
    };
    const done = loop();
    await scheduler.advanceAsync(1000);
    await done;
    expect(seen).toEqual([100, 200, 300]);
  });

  it('refuses a negative or non-finite step and a non-finite start', async () => {
    const scheduler = new ManualScheduler();
    expect(() => scheduler.advance(-1)).toThrow(rangeError('ratekeeper: `ms` must be a finite number of at least 0, got -1'));
    await expect(scheduler.advanceAsync(Number.NaN)).rejects.toThrow(RangeError);
    expect(() => new ManualScheduler(Infinity)).toThrow(rangeError('ratekeeper: `startMs` must be a finite number, got Infinity'));
    expect(scheduler.now()).toBe(0);
  });
});
