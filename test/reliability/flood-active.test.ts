import { describe, expect, it } from 'vitest';
import { type Decision, KeyedRateLimiter, ManualScheduler, type PeekableAlgorithm, Rule, TokenBucket } from '../../src/index';
import { algorithms, composites } from '../support/algorithms';
import { heapAfterGc } from '../support/heap';

// What test/limiter/flood.test.ts leaves out: keys that were active before the flood began, under
// every algorithm and composite, swept past again and again while unique keys churn through the
// table; and a caller waiting on one of them. Ten million keys are the benchmark's (bench/flood.ts).

const FLOOD = 300_000;
const MAX_KEYS = 25_000; // about 10 000 flood keys are active at any time; reclaiming keeps the table within 2.5× of that

describe('a flood of unique keys while other keys are active', () => {
  it('every algorithm: the active keys stay resident and refused exactly as their twins, a waiter is granted on time, and memory stays bounded', async () => {
    const scheduler = new ManualScheduler(1_764_000_000_000);
    const watchedRule = new Rule(5, 3_600_000); // spent out: nothing comes back within the flood's 3 s
    const cases = [...algorithms, ...composites];
    const limiter = new KeyedRateLimiter({
      algorithm: (key) => (key.startsWith('w:') ? cases[Number(key.split(':')[1])]!.make(watchedRule) : new TokenBucket(Rule.perSecond(10))),
      clock: scheduler,
      maxKeys: MAX_KEYS,
    });
    const watched: { key: string; twin: PeekableAlgorithm }[] = [];
    cases.forEach((c, i) => {
      for (let j = 0; j < 10; j++) {
        const key = `w:${i}:${j}`;
        const twin = c.make(watchedRule);
        expect(limiter.tryAcquire(key, 5)).toStrictEqual(twin.tryAcquire(scheduler.now(), 5));
        watched.push({ key, twin });
      }
    });
    // One caller waits on a spent key for its next permit, 12 minutes away (a token bucket: 5 an hour).
    let granted: Decision | undefined;
    void limiter.acquire('w:0:0').then((d) => (granted = d));
    const heapBefore = heapAfterGc();
    let refused = 0;
    let largest = 0;
    for (let i = 0; i < FLOOD; i++) {
      if (i % 100 === 99) scheduler.advance(1); // flood keys go idle 100 ms (10 000 calls) after their permit
      if (!limiter.tryAcquire(`flood:${i}`).allowed) refused++;
      if (i % 50_000 === 49_999) {
        largest = Math.max(largest, limiter.size);
        for (const { key, twin } of watched.slice(1)) {
          const decision = limiter.tryAcquire(key);
          expect(decision).toStrictEqual(twin.tryAcquire(scheduler.now()));
          expect(decision.allowed).toBe(false);
        }
      }
    }
    expect(largest).toBeLessThanOrEqual(MAX_KEYS);
    expect(refused).toBe(0); // the churning keys went idle in time: nobody was turned away for room
    expect(heapAfterGc() - heapBefore).toBeLessThan(16 * 2 ** 20);
    expect(granted).toBeUndefined();
    scheduler.advance(720_000 - 3_000 - 1); // the flood took 3 s: 1 ms short of 12 minutes after the spend
    await Promise.resolve();
    expect(granted).toBeUndefined();
    scheduler.advance(1);
    await Promise.resolve();
    expect(granted).toMatchObject({ allowed: true, remaining: 0 });
  });
});
