import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { Composite, KeyedRateLimiter, ManualClock, Rule, SlidingWindowLog, TokenBucket, type PeekableAlgorithm, type RateLimitAlgorithm } from '../../src/index';
import { algorithms, composites } from '../support/algorithms';
import { rangeError, typeError } from '../../src/core/errors';

const bucketOf = (limit: number) => () => new TokenBucket(Rule.perSecond(limit));

describe('KeyedRateLimiter', () => {
  it('keeps one independent state per key, built by the factory lambda with the key', () => {
    const clock = new ManualClock();
    const seen: string[] = [];
    const limiter = new KeyedRateLimiter({
      algorithm: (key) => {
        seen.push(key);
        return new TokenBucket(Rule.perSecond(key.startsWith('pro:') ? 10 : 1));
      },
      clock,
    });
    expect(limiter.tryAcquire('free:a')).toMatchObject({ allowed: true, limit: 1, remaining: 0 });
    expect(limiter.tryAcquire('free:a')).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(limiter.tryAcquire('free:b')).toMatchObject({ allowed: true });
    expect(limiter.tryAcquire('pro:c', 10)).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    expect(seen).toEqual(['free:a', 'free:b', 'pro:c']);
    expect(limiter.size).toBe(3);
  });

  it('reads its clock once per call', () => {
    let reads = 0;
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(2), clock: { now: () => (reads++, 0) } });
    limiter.tryAcquire('a');
    limiter.tryAcquire('a');
    limiter.tryAcquire('b');
    expect(reads).toBe(3);
  });

  it('refuses a new key when the table is full of active keys, and admits it once one goes idle', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(2), clock, maxKeys: 2 });
    limiter.tryAcquire('a');
    clock.advance(200);
    limiter.tryAcquire('b');
    const refused = limiter.tryAcquire('c');
    expect(refused).toEqual({ allowed: false, limit: 2, remaining: 0, retryAfterMs: 1000, resetAfterMs: 1000, degraded: 'key-table-full' });
    expect(limiter.size).toBe(2);
    clock.advance(300); // 'a' is full again at 500 ms; 'b' is not
    expect(limiter.tryAcquire('c')).toMatchObject({ allowed: true, remaining: 1 });
    expect(limiter.size).toBe(2);
    expect(limiter.tryAcquire('b')).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('admits a newcomer whenever a resident key is idle, wherever that key sits in a full table', () => {
    for (const [maxKeys, step] of [[100, 1], [10_000, 997]] as const) {
      for (let position = 0; position < maxKeys; position += step) {
        const clock = new ManualClock(1_764_000_000_000);
        // Every key keeps its one permit for an hour, except the one at `position`: idle 1 ms after it.
        const limiter = new KeyedRateLimiter({
          algorithm: (key) => new TokenBucket(key === `k${position}` ? new Rule(1000, 1000) : Rule.perHour(1)),
          clock,
          maxKeys,
        });
        for (let i = 0; i < maxKeys; i++) limiter.tryAcquire(`k${i}`);
        expect(limiter.tryAcquire('early')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
        clock.advance(1);
        expect(limiter.tryAcquire('newcomer'), `maxKeys ${maxKeys}, idle key at ${position}`).toMatchObject({ allowed: true });
        expect(limiter.size).toBe(maxKeys);
        expect(limiter.tryAcquire('another')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
      }
    }
  });

  test.prop([fc.array(fc.record({ dt: fc.integer({ min: 0, max: 400 }), key: fc.integer({ min: 0, max: 30 }), permits: fc.integer({ min: 1, max: 3 }) }), { maxLength: 200 })])(
    'a newcomer is refused as key-table-full only when no resident key is idle',
    (ops) => {
      const clock = new ManualClock();
      const limiter = new KeyedRateLimiter({ algorithm: (key) => new TokenBucket(new Rule(3, 100 + 37 * (key.length % 5))), clock, maxKeys: 8 });
      for (const { dt, key, permits } of ops) {
        clock.advance(dt);
        const decision = limiter.tryAcquire(`key-${'x'.repeat(key % 7)}${key}`, permits);
        // evictIdle at the same reading removes exactly the idle keys: none may be left behind a refusal.
        if (decision.degraded === 'key-table-full') expect(limiter.evictIdle()).toBe(0);
      }
    },
  );

  it('admits a newcomer in place of a key that a reconfiguration made idle sooner, on a full table', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(3)), clock, maxKeys: 1 });
    limiter.tryAcquire('a'); // under 3 per minute, back to full in 20 s
    expect(limiter.tryAcquire('b').degraded).toBe('key-table-full');
    limiter.reconfigure(() => new TokenBucket(Rule.perSecond(3))); // the spent token comes back in 334 ms
    clock.advance(334);
    expect(limiter.tryAcquire('b')).toMatchObject({ allowed: true, limit: 3, remaining: 2 });
    expect(limiter.size).toBe(1);
  });

  const kinds = [...algorithms, ...composites];
  const tableOpArb = fc.oneof(
    { weight: 10, arbitrary: fc.record({ dt: fc.integer({ min: -50, max: 400 }), key: fc.integer({ min: 0, max: 12 }), permits: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 1, arbitrary: fc.record({ algorithm: fc.integer({ min: 0, max: kinds.length - 1 }), limit: fc.integer({ min: 3, max: 5 }), windowMs: fc.integer({ min: 1, max: 500 }) }) },
    { weight: 1, arbitrary: fc.record({ evictBack: fc.integer({ min: 0, max: 1000 }) }) },
  );

  test.prop([fc.integer({ min: 0, max: kinds.length - 1 }), fc.integer({ min: 1, max: 4 }), fc.array(tableOpArb, { maxLength: 150 })], { numRuns: 300 })(
    'a newcomer is refused as key-table-full only when no resident key is idle, across reconfigurations and readings that go back',
    (first, maxKeys, ops) => {
      const clock = new ManualClock(1_764_000_000_000);
      const limiter = new KeyedRateLimiter({ algorithm: () => (kinds[first] as (typeof kinds)[number]).make(new Rule(3, 200)), clock, maxKeys });
      for (const op of ops) {
        if ('dt' in op) {
          clock.set(clock.now() + op.dt);
          if (limiter.tryAcquire(`k${op.key}`, op.permits).degraded === 'key-table-full') expect(limiter.evictIdle()).toBe(0);
          expect(limiter.size).toBeLessThanOrEqual(maxKeys);
        } else if ('algorithm' in op) {
          const rule = new Rule(op.limit, op.windowMs);
          limiter.reconfigure(() => (kinds[op.algorithm] as (typeof kinds)[number]).make(rule));
        } else {
          limiter.evictIdle(clock.now() - op.evictBack);
        }
      }
    },
  );

  it('looks at the keys of a custom algorithm without peek a few times each, not once per ms, while a full table refuses', () => {
    const clock = new ManualClock();
    let looks = 0;
    const busy = () => ({
      tryAcquire: () => ({ allowed: true as const, limit: 1, remaining: 0, retryAfterMs: 0 as const, resetAfterMs: 0 }),
      isIdle: () => (looks++, false),
    });
    const limiter = new KeyedRateLimiter({ algorithm: busy, clock, maxKeys: 1000 });
    for (let i = 0; i < 1000; i++) limiter.tryAcquire(`k${i}`);
    looks = 0;
    for (let ms = 0; ms < 1000; ms++) {
      clock.advance(1);
      for (let i = 0; i < 10; i++) expect(limiter.tryAcquire(`new${ms}-${i}`).degraded).toBe('key-table-full');
    }
    expect(looks).toBeLessThan(20 * 1000); // about log2(1000) each; one per ms would be 1 000 000
  });

  it('looks at full-table composite keys when they can go idle, not once per ms, while it refuses newcomers', () => {
    const clock = new ManualClock();
    let peeks = 0;
    const counted = <A extends PeekableAlgorithm>(part: A): A => {
      const peek = part.peek.bind(part);
      part.peek = (now, permits) => (peeks++, peek(now, permits));
      return part;
    };
    const composite = () => new Composite([new TokenBucket(Rule.perSecond(10)), new SlidingWindowLog(Rule.perHour(100))]);
    const resident = () => new Composite([counted(new TokenBucket(Rule.perSecond(10))), counted(new SlidingWindowLog(Rule.perHour(100)))]);
    const limiter = new KeyedRateLimiter({ algorithm: (key) => (key.startsWith('new') ? composite() : resident()), clock, maxKeys: 1000 });
    for (let i = 0; i < 1000; i++) limiter.tryAcquire(`k${i}`, 10);
    clock.advance(2000); // the per-second parts are full again; the hourly ones bind, active for an hour
    peeks = 0;
    for (let ms = 0; ms < 1000; ms++) {
      clock.advance(1);
      for (let i = 0; i < 10; i++) expect(limiter.tryAcquire(`new${ms}-${i}`).degraded).toBe('key-table-full');
    }
    expect(peeks).toBeLessThan(20 * 1000); // a few per resident key; once per key per ms was 2 000 000
  });

  it('removes only idle keys on evictIdle', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(1), clock });
    limiter.tryAcquire('a');
    clock.advance(600);
    limiter.tryAcquire('b');
    expect(limiter.evictIdle()).toBe(0);
    clock.advance(400);
    expect(limiter.evictIdle()).toBe(1);
    expect(limiter.size).toBe(1);
    expect(limiter.tryAcquire('b')).toMatchObject({ allowed: false, retryAfterMs: 600 });
  });

  it('never forgives nor poisons when evictIdle is given a reading ahead of the clock', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(1), clock });
    limiter.tryAcquire('a');
    expect(limiter.evictIdle(1000)).toBe(0); // 'a' is idle at 1000, but the clock says 0: still active
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(limiter.evictIdle(1e300)).toBe(0);
    clock.advance(1000);
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 1000 });
    expect(() => limiter.evictIdle(Infinity)).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got Infinity'));
  });

  it('evictIdle after reconfigure removes keys that went idle after the switch', () => {
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(1), clock });
    limiter.tryAcquire('a');
    limiter.tryAcquire('b');
    limiter.reconfigure(bucketOf(2));
    clock.advance(2000);
    expect(limiter.evictIdle()).toBe(2);
    expect(limiter.size).toBe(0);
    expect(limiter.evictIdle()).toBe(0);
  });

  it('refuses a -Infinity reading after a valid one, as NaN and +Infinity', () => {
    const readings = [5, -Infinity, Number.NaN, Infinity];
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(1), clock: { now: () => readings.shift() as number } });
    limiter.tryAcquire('a');
    expect(() => limiter.tryAcquire('a')).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got -Infinity'));
    expect(() => limiter.tryAcquire('a')).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got NaN'));
    expect(() => limiter.tryAcquire('a')).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got Infinity'));
  });

  // The table remembers the last key it found, so a hot key skips the map lookup. Each way a key
  // leaves the table must forget it there too, or the key would go on deciding on a state the table
  // no longer holds, and start fresh (forgiven) once another key came in between.
  describe('the last key found, after it leaves the table', () => {
    const spentThenIdle = () => {
      const clock = new ManualClock();
      const limiter = new KeyedRateLimiter({ algorithm: bucketOf(2), clock });
      limiter.tryAcquire('hot');
      limiter.tryAcquire('hot'); // found in the table: now the last key found
      clock.advance(1000); // full again: idle, so the table may forget it
      return { clock, limiter };
    };
    const spendAgainAfterAnotherKey = (limiter: KeyedRateLimiter) => {
      expect(limiter.tryAcquire('hot', 2)).toMatchObject({ allowed: true, remaining: 0 });
      limiter.tryAcquire('other');
      limiter.tryAcquire('other'); // another key found in between
      expect(limiter.tryAcquire('hot')).toMatchObject({ allowed: false, retryAfterMs: 500 });
    };

    it('is forgotten when the sweep reclaims it', () => {
      const { limiter } = spentThenIdle();
      limiter.tryAcquire('new'); // sweeps two entries: 'hot' is one, and idle
      expect(limiter.size).toBe(1);
      spendAgainAfterAnotherKey(limiter);
    });

    it('is forgotten when evictIdle removes it', () => {
      const { limiter } = spentThenIdle();
      expect(limiter.evictIdle()).toBe(1);
      spendAgainAfterAnotherKey(limiter);
    });

    it('is forgotten when reconfigure moves it to the new rule', () => {
      const clock = new ManualClock();
      const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(10)), clock });
      limiter.tryAcquire('hot');
      limiter.tryAcquire('hot');
      limiter.reconfigure(() => new TokenBucket(Rule.perMinute(100)));
      expect(limiter.tryAcquire('hot')).toMatchObject({ limit: 100, remaining: 97 });
      expect(limiter.tryAcquire('hot')).toMatchObject({ limit: 100, remaining: 96 });
    });
  });

  it('refuses bad arguments with errors naming them and leaves the table as it was', () => {
    const limiter = new KeyedRateLimiter({ algorithm: bucketOf(3), clock: new ManualClock() });
    limiter.tryAcquire('a');
    expect(() => limiter.tryAcquire('b', 4)).toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 3, got 4'));
    expect(() => limiter.tryAcquire(42 as unknown as string)).toThrow(typeError('ratekeeper: `key` must be a string, got 42'));
    expect(limiter.size).toBe(1);
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: true, remaining: 1 });
  });

  it('refuses bad options with errors naming them', () => {
    expect(() => new KeyedRateLimiter(undefined as never)).toThrow(TypeError);
    expect(() => new KeyedRateLimiter({ algorithm: 'token-bucket' as never })).toThrow(
      typeError('ratekeeper: `algorithm` must be a function returning a fresh algorithm, got "token-bucket"'),
    );
    expect(() => new KeyedRateLimiter({ algorithm: bucketOf(1), clock: Date as never })).toThrow(TypeError);
    expect(() => new KeyedRateLimiter({ algorithm: bucketOf(1), maxKeys: 0 })).toThrow(
      rangeError('ratekeeper: `maxKeys` must be a safe integer of at least 1, got 0'),
    );
  });
});

const opArb = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('acquire' as const), key: fc.integer({ min: 0, max: 12 }), dt: fc.integer({ min: -300, max: 700 }), permits: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('evict' as const), dt: fc.integer({ min: 0, max: 700 }) }) },
);

describe.each(algorithms)('eviction with $name', ({ make }) => {
  test.prop([fc.array(opArb, { maxLength: 150, size: 'max' })])(
    'eviction is invisible to decisions, even when the clock steps back: no active limit is ever forgiven',
    (ops) => {
      const rule = new Rule(3, 1000);
      const clock = new ManualClock(1_000_000);
      const limiter = new KeyedRateLimiter({ algorithm: () => make(rule), clock });
      const reference = new Map<string, RateLimitAlgorithm>();
      let latest = -Infinity; // a reading earlier than the latest is no time passing, limiter-wide
      for (const op of ops) {
        clock.set(clock.now() + op.dt);
        latest = Math.max(latest, clock.now());
        if (op.kind === 'evict') {
          limiter.evictIdle();
          continue;
        }
        const key = `k${op.key}`;
        if (!reference.has(key)) reference.set(key, make(rule));
        const expected = reference.get(key)?.tryAcquire(latest, op.permits);
        expect(limiter.tryAcquire(key, op.permits)).toEqual(expected);
      }
    },
  );
});
