// Issue 24, deliverable 5: a bucket's reservations that overlap refund exactly, settled in any order
// (API.md, reserve / settle), and a key keeps at most MAX_RECEIPTS outstanding receipts.
import { describe, expect, it } from 'vitest';
import { MAX_RECEIPTS } from '../../src/algorithms/accounting';
import { KeyedRateLimiter, LeakyBucket, ManualClock, Rule, TokenBucket } from '../../src/index';
import { MAX_RECEIPTS as STORE_MAX_RECEIPTS } from '../../src/store/constants';

describe.each([
  { name: 'TokenBucket', make: (rule: Rule) => new TokenBucket(rule) },
  { name: 'LeakyBucket', make: (rule: Rule) => new LeakyBucket(rule) },
])('$name', ({ make }) => {
  const limiterOf = (rule: Rule) => {
    const clock = new ManualClock(1_764_000_000_000);
    return { clock, limiter: new KeyedRateLimiter({ algorithm: () => make(rule), clock }) };
  };

  it('issue 24: ten reservations of 1000 settled in reverse order (odd ones cancelled, even ones at 500) leave 7500', () => {
    const { limiter } = limiterOf(Rule.perMinute(10_000));
    const reservations = Array.from({ length: 10 }, () => limiter.reserve('k', 1000));
    for (let i = 9; i >= 0; i--) {
      if (i % 2 === 1) reservations[i]!.cancel();
      else reservations[i]!.settle(500);
    }
    expect(limiter.peek('k', 0).remaining).toBe(7500);
  });

  it('API.md: a full bucket of 10, reserve A 5, reserve B 3, cancel B, cancel A: 10 again', () => {
    const { limiter } = limiterOf(new Rule(10, 60_000));
    const a = limiter.reserve('k', 5);
    const b = limiter.reserve('k', 3);
    b.cancel();
    a.cancel();
    expect(limiter.peek('k', 0)).toEqual({ allowed: true, limit: 10, remaining: 10, retryAfterMs: 0, resetAfterMs: 0 });
  });

  it('DESIGN-24 D4 worked check: A 5, B 3, refill to a deficit of 2, C 4; cancelling A gives 2, then B nothing: as the twin that reserved only C', () => {
    const { clock, limiter } = limiterOf(new Rule(10, 10_000));
    const a = limiter.reserve('k', 5);
    const b = limiter.reserve('k', 3);
    clock.advance(6000);
    limiter.reserve('k', 4);
    a.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(6);
    b.cancel();
    const twin = limiterOf(new Rule(10, 10_000));
    twin.clock.advance(6000);
    twin.limiter.tryAcquire('k', 4);
    expect(limiter.peek('k', 0)).toEqual(twin.limiter.peek('k', 0));
  });

  it('a refund never credits what refill already repaid: spend 5 of 10, refill to full, spend 8; the late refund of 5 gives nothing', () => {
    const { clock, limiter } = limiterOf(new Rule(10, 10_000));
    const reservation = limiter.reserve('k', 5);
    clock.advance(5000);
    limiter.tryAcquire('k', 8);
    reservation.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(2);
  });

  it(`keeps ${MAX_RECEIPTS} outstanding receipts: the next reservation voids the oldest, whose refund then gives nothing`, () => {
    expect(STORE_MAX_RECEIPTS).toBe(MAX_RECEIPTS);
    const { limiter } = limiterOf(new Rule(100, 60_000));
    const reservations = Array.from({ length: MAX_RECEIPTS }, () => limiter.reserve('k', 1));
    reservations[0]!.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(100 - MAX_RECEIPTS + 1);
    reservations.push(limiter.reserve('k', 1), limiter.reserve('k', 1));
    expect(limiter.peek('k', 0).remaining).toBe(100 - MAX_RECEIPTS - 1);
    // Outstanding: reservations 1 to 65; the 66th voided the oldest, reservation 1.
    reservations[1]!.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(100 - MAX_RECEIPTS - 1);
    reservations[2]!.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(100 - MAX_RECEIPTS);
    for (const reservation of reservations.slice(3)) reservation.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(99);
  });

  it('a reservation settled at or above what it reserved releases its receipt: it takes none of the bound', () => {
    const { limiter } = limiterOf(new Rule(1000, 60_000));
    const first = limiter.reserve('k', 1);
    for (let i = 0; i < MAX_RECEIPTS; i++) limiter.reserve('k', 1).settle(i % 2 === 0 ? 1 : 2);
    first.cancel();
    expect(limiter.peek('k', 0).remaining).toBe(1000 - MAX_RECEIPTS * 1.5);
  });

  it('a charge that reaches the debt bound voids the receipts issued before it', () => {
    const { limiter } = limiterOf(new Rule(10, 60_000));
    const reservation = limiter.reserve('k', 4);
    limiter.charge('k', 100);
    reservation.cancel();
    expect(limiter.peek('k', 0)).toMatchObject({ remaining: 0, resetAfterMs: 120_000 });
  });
});

it('a wide bucket (1e15 per day) refunds overlapping reservations exactly too', () => {
  const rule = new Rule(1e15, 86_400_000);
  const clock = new ManualClock(0);
  const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock });
  const reservations = Array.from({ length: 10 }, () => limiter.reserve('k', 1e14));
  for (let i = 9; i >= 0; i--) {
    if (i % 2 === 1) reservations[i]!.cancel();
    else reservations[i]!.settle(5e13);
  }
  expect(limiter.peek('k', 0).remaining).toBe(1e15 - 5 * 5e13);
});

it('TokenBucket.refund called directly with permits below 0 or NaN changes nothing (it would otherwise charge)', () => {
  const bucket = new TokenBucket(new Rule(10, 60_000));
  const { receipt } = bucket.reserve(0, 5);
  for (const permits of [-3, Number.NaN]) bucket.refund(0, receipt!, permits);
  expect(bucket.peek(0, 0).remaining).toBe(5);
  bucket.refund(0, receipt!, 5);
  expect(bucket.peek(0, 0).remaining).toBe(10);
});
