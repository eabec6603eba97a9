import { describe, expect, it } from 'vitest';
import { FixedWindow, Rule, SlidingWindowCounter, SlidingWindowLog } from '../../src/index';
import { heapAfterGc } from '../support/heap';
import { expectTimeline } from '../support/timeline';

describe('a burst straddling a window boundary', () => {
  const burst = (state: FixedWindow | SlidingWindowLog) => {
    let granted = 0;
    for (const at of [900, 900, 900, 900, 1000, 1000, 1000, 1000]) if (state.tryAcquire(at).allowed) granted++;
    return granted;
  };

  it('gets 2× the limit through a fixed window', () => {
    expect(burst(new FixedWindow(Rule.perSecond(4)))).toBe(8);
  });

  it('gets only the limit through a sliding log', () => {
    expect(burst(new SlidingWindowLog(Rule.perSecond(4)))).toBe(4);
  });
});

describe('FixedWindow', () => {
  it('aligns windows to the clock zero, negative times included', () => {
    expectTimeline(new FixedWindow(Rule.perSecond(2)), [
      { at: -1, permits: 2, allowed: true, remaining: 0, resetAfterMs: 1 },
      { at: -1, allowed: false, retryAfterMs: 1 },
      { at: 0, allowed: true, remaining: 1, resetAfterMs: 1000 },
      { at: 999, allowed: true, remaining: 0 },
      { at: 999, allowed: false, retryAfterMs: 1 },
    ]);
  });
});

describe('SlidingWindowLog', () => {
  it('lets each hit leave at exactly its time + windowMs', () => {
    expectTimeline(new SlidingWindowLog(Rule.perSecond(2)), [
      { at: 100, allowed: true, remaining: 1 },
      { at: 700, allowed: true, remaining: 0, resetAfterMs: 1000 },
      { at: 800, allowed: false, retryAfterMs: 300, resetAfterMs: 900 },
      { at: 1099, allowed: false, retryAfterMs: 1 },
      { at: 1100, allowed: true, remaining: 0 },
      { at: 1100, permits: 2, allowed: false, retryAfterMs: 1000 },
    ]);
  });

  it('keeps order while its ring wraps around many times', () => {
    const log = new SlidingWindowLog(new Rule(3, 10));
    for (let t = 0; t < 1000; t += 10) {
      expect(log.tryAcquire(t).allowed).toBe(true);
      expect(log.tryAcquire(t + 1).allowed).toBe(true);
      expect(log.tryAcquire(t + 2)).toMatchObject({ allowed: true, remaining: 0 });
      expect(log.tryAcquire(t + 3)).toMatchObject({ allowed: false, retryAfterMs: 7, resetAfterMs: 9 });
    }
  });
});

describe('SlidingWindowCounter', () => {
  it('estimates 60 with 80 last window and 20 this window, thirty seconds into a minute', () => {
    const counter = new SlidingWindowCounter(Rule.perMinute(100));
    counter.tryAcquire(0, 80);
    counter.tryAcquire(60_000, 20);
    expectTimeline(counter, [
      { at: 90_000, permits: 41, allowed: false, remaining: 40 },
      { at: 90_000, permits: 40, allowed: true, remaining: 0 },
    ]);
  });

  it('waits through two rollovers when a whole-limit request meets a used window', () => {
    expectTimeline(new SlidingWindowCounter(Rule.perSecond(4)), [
      { at: 500, allowed: true, remaining: 3, resetAfterMs: 1500 },
      { at: 600, permits: 4, allowed: false, retryAfterMs: 1400 },
      { at: 1999, permits: 4, allowed: false, retryAfterMs: 1 },
      { at: 2000, permits: 4, allowed: true, remaining: 0 },
    ]);
  });

  it('lets the previous window fade linearly and waits exactly for it', () => {
    expectTimeline(new SlidingWindowCounter(Rule.perSecond(10)), [
      { at: 0, permits: 10, allowed: true },
      { at: 1000, allowed: false, retryAfterMs: 100 },
      { at: 1100, allowed: true, remaining: 0 },
    ]);
  });
});

describe('SlidingWindowLog stores grants, not permits', () => {
  it('keeps one entry per grant: logs granted a million permits each hold a few numbers, not a million', () => {
    const before = heapAfterGc();
    const logs = Array.from({ length: 4 }, () => new SlidingWindowLog(Rule.perMinute(1_000_000)));
    for (const log of logs) expect(log.tryAcquire(0, 1_000_000)).toMatchObject({ allowed: true, remaining: 0 });
    // Per permit this was 8 MB a log.
    expect(heapAfterGc() - before).toBeLessThan(2 ** 20);
    expect(logs[0]!.tryAcquire(59_999)).toMatchObject({ allowed: false, retryAfterMs: 1 });
  });

  it('lets grants at one reading share an entry, and still leave exactly', () => {
    const log = new SlidingWindowLog(new Rule(10, 1000));
    expectTimeline(log, [
      { at: 0, permits: 3, allowed: true, remaining: 7 },
      { at: 500, permits: 2, allowed: true, remaining: 5 },
      { at: 500, permits: 4, allowed: true, remaining: 1 },
      { at: 500, permits: 2, allowed: false, retryAfterMs: 500 },
      { at: 1000, permits: 4, allowed: true, remaining: 0 },
      { at: 1000, permits: 6, allowed: false, remaining: 0, retryAfterMs: 500, resetAfterMs: 1000 },
      { at: 1000, permits: 7, allowed: false, remaining: 0, retryAfterMs: 1000 },
      { at: 1500, permits: 6, allowed: true, remaining: 0 },
    ]);
  });

  it('stays exact when its running totals pass 2^53: they are counted again from the oldest live grant', () => {
    const half = 2 ** 52 - 1; // two of these fit a limit of 2^53 - 1, with 1 to spare
    const log = new SlidingWindowLog(new Rule(Number.MAX_SAFE_INTEGER, 1000));
    log.tryAcquire(-500, half);
    for (let at = 0; at < 10_000; at += 500) {
      expect(log.tryAcquire(at, half)).toMatchObject({ allowed: true, remaining: 1 });
      expect(log.tryAcquire(at, 2)).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 500 });
      expect(log.tryAcquire(at + 499, 2)).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 1 });
    }
  });
});
