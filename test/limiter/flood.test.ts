import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import { heapAfterGc } from '../support/heap';

// A million unique keys against a bounded table. Memory is read after a full garbage collection;
// speed is the benchmark's business, not these tests'.

const KEYS = 1_000_000;

describe('a flood of a million unique keys', () => {
  it('with every key still active: the table stays at maxKeys, newcomers are refused, and no active key is forgiven', () => {
    const clock = new ManualClock(1_764_000_000_000);
    const rule = Rule.perMinute(5);
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock, maxKeys: 10_000 });
    const heapBefore = heapAfterGc();
    let admitted = 0;
    let tableFull = 0;
    for (let i = 0; i < KEYS; i++) {
      const key = `flood-${i}`;
      const decision = limiter.tryAcquire(key);
      if (decision.allowed) {
        admitted++;
        if (i % 1000 === 0) limiter.tryAcquire(key, 4); // spend the rest: active for a whole second
      } else if (decision.degraded === 'key-table-full') {
        tableFull++;
      }
      if (i % 1000 === 999) clock.advance(1); // a second in all: no key refills its permit in time
    }
    expect(admitted).toBe(10_000);
    expect(tableFull).toBe(KEYS - 10_000);
    expect(limiter.size).toBe(10_000);
    for (let i = 0; i < 10_000; i += 1000) {
      expect(limiter.tryAcquire(`flood-${i}`)).toMatchObject({ allowed: false, remaining: 0 });
    }
    expect(heapAfterGc() - heapBefore).toBeLessThan(32 * 2 ** 20);
  });

  it('with keys going idle as it flows: the table stays within maxKeys, newcomers are admitted, and no active key is forgiven', () => {
    const clock = new ManualClock(1_764_000_000_000);
    const rule = Rule.perSecond(10);
    const maxKeys = 25_000;
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock, maxKeys });
    const heapBefore = heapAfterGc();
    const watched: { key: string; twin: TokenBucket }[] = [];
    let refused = 0;
    let largest = 0;
    for (let i = 0; i < KEYS; i++) {
      if (i % 100 === 0) clock.advance(1); // 100 new keys a ms; each goes idle 100 ms after its one permit
      const key = `flood-${i}`;
      if (!limiter.tryAcquire(key).allowed) refused++;
      else if (i % 10_000 === 0) {
        limiter.tryAcquire(key, 9); // spent out: active for a second, that is 100 000 keys later
        const twin = new TokenBucket(rule);
        twin.tryAcquire(clock.now(), 10);
        watched.push({ key, twin });
      }
      if (i % 5000 === 4999) {
        largest = Math.max(largest, limiter.size);
        // A watched key that is still refilling is refused exactly as its twin, never as a new key.
        for (const { key: k, twin } of watched.slice(-8)) {
          if (!twin.isIdle(clock.now())) expect(limiter.tryAcquire(k, 10)).toEqual(twin.tryAcquire(clock.now(), 10));
        }
      }
    }
    expect(largest).toBeLessThanOrEqual(maxKeys);
    expect(refused).toBeLessThan(KEYS / 100);
    expect(heapAfterGc() - heapBefore).toBeLessThan(32 * 2 ** 20);
  });
});

describe('an unbounded table under a steady flood of new keys', () => {
  // The README's memory claim: idle keys are reclaimed as new keys arrive (two entries examined per
  // new key), so the table never holds more than twice its active keys. With one entry per new key
  // it grew past 4x and kept growing.
  test.prop([fc.integer({ min: 1, max: 40 }), fc.integer({ min: 10, max: 2000 })], { numRuns: 40 })(
    'holds at most twice the keys that are active, however fast they come and however long they stay active',
    (rate, activeMs) => {
      const perMs = Math.max(1, Math.min(rate, Math.floor(10_000 / activeMs))); // up to 10 000 active keys
      const clock = new ManualClock(1_764_000_000_000);
      const rule = new Rule(1, activeMs); // one permit a key: active for exactly activeMs after it
      const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock });
      let next = 0;
      let admitted = 0;
      let worst = 0;
      for (let ms = 1; ms <= 6 * activeMs; ms++) {
        for (let i = 0; i < perMs; i++) if (limiter.tryAcquire(`flood-${next++}`).allowed) admitted++;
        const active = perMs * Math.min(ms, activeMs); // the keys that arrived in the last activeMs
        worst = Math.max(worst, limiter.size / active);
        clock.advance(1);
      }
      expect(admitted).toBe(next);
      expect(worst).toBeLessThanOrEqual(2);
    },
  );
});
