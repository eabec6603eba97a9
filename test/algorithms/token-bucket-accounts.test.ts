// The token bucket's accounts (issue 13) for every rule of the Rule domain: rules whose bucket spans
// more than 2^53 scaled units (down to the debt bound) keep whole tokens and units apart (the "wide
// plan"), and must decide exactly as the bucket would with infinite precision. The twin below is
// that bucket, written plainly in BigInt, unreduced: a token is `windowMs` units, refill `limit` a ms.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { DEBT_LIMITS, MAX_RECEIPTS, type Receipt } from '../../src/algorithms/accounting';
import { KeyedRateLimiter, LeakyBucket, ManualClock, Rule, TokenBucket, type Decision } from '../../src/index';

const MAX = Number.MAX_SAFE_INTEGER;

interface Exact {
  readonly allowed: boolean;
  readonly remaining: bigint;
  readonly retryAfterMs: bigint;
  readonly resetAfterMs: bigint;
}

const ceil = (n: bigint, d: bigint) => (n <= 0n ? -(-n / d) : (n + d - 1n) / d);
const floor = (n: bigint, d: bigint) => (n >= 0n ? n / d : -((-n + d - 1n) / d));
const atLeast0 = (n: bigint) => (n > 0n ? n : 0n);

/**
 * The contract's bucket with debt and receipts, in exact integers (DESIGN-24 D4). Each outstanding
 * receipt holds the highest level over its segment (from its grant to the next one's, the last to
 * now); a refund gives back its permits, at most what the highest level since its grant was short
 * of full, raises every later segment's level by as much, and its segment joins the one before. A
 * full bucket, a charge past the debt bound and the bound on receipts void them.
 */
class BigBucket {
  level: bigint;
  last: bigint | undefined;
  receipts: BigReceipt[] = [];
  constructor(readonly limit: bigint, readonly w: bigint) {
    this.level = limit * w;
  }
  get capacity(): bigint {
    return this.limit * this.w;
  }
  at(nowMs: bigint): bigint {
    return this.last !== undefined && nowMs < this.last ? this.last : nowMs;
  }
  levelAt(now: bigint): bigint {
    const filled = this.last === undefined ? this.level : this.level + (now - this.last) * this.limit;
    return filled < this.capacity ? filled : this.capacity;
  }
  /** Every change first records the level reached by then in the last segment. */
  fold(level: bigint): void {
    if (level === this.capacity) this.receipts = [];
    const last = this.receipts[this.receipts.length - 1];
    if (last !== undefined && level > last.high) last.high = level;
  }
  state(units: bigint): Exact {
    return { allowed: true, remaining: atLeast0(floor(units, this.w)), retryAfterMs: 0n, resetAfterMs: ceil(this.capacity - units, this.limit) };
  }
  decide(nowMs: bigint, permits: bigint, spend: boolean): Exact {
    const now = this.at(nowMs);
    const units = this.levelAt(now);
    if (permits === 0n) return this.state(units);
    const cost = permits * this.w;
    if (units < cost) {
      return { allowed: false, remaining: atLeast0(floor(units, this.w)), retryAfterMs: ceil(cost - units, this.limit), resetAfterMs: ceil(this.capacity - units, this.limit) };
    }
    if (spend) {
      this.fold(units);
      [this.level, this.last] = [units - cost, now];
    }
    return this.state(units - cost);
  }
  charge(nowMs: bigint, permits: bigint): Exact {
    const now = this.at(nowMs);
    const held = this.levelAt(now);
    this.fold(held);
    const wanted = held - permits * this.w;
    const bound = -BigInt(DEBT_LIMITS) * this.capacity;
    if (wanted < bound) this.receipts = [];
    [this.level, this.last] = [wanted < bound ? bound : wanted, now];
    return this.state(this.level);
  }
  reserve(nowMs: bigint, permits: bigint): { decision: Exact; receipt: BigReceipt | undefined } {
    const decision = this.decide(nowMs, permits, true);
    if (!decision.allowed) return { decision, receipt: undefined };
    const receipt = { high: this.level };
    this.receipts.push(receipt);
    if (this.receipts.length > MAX_RECEIPTS) this.receipts.shift();
    return { decision, receipt };
  }
  refund(nowMs: bigint, receipt: BigReceipt, permits: bigint): void {
    const i = this.receipts.indexOf(receipt);
    if (i === -1) return;
    const now = this.at(nowMs);
    [this.level, this.last] = [this.levelAt(now), now];
    this.fold(this.level);
    if (this.receipts.length === 0) return;
    const later = this.receipts.slice(i);
    const top = later.reduce((high, r) => (r.high > high ? r.high : high), 0n - this.capacity);
    const given = permits * this.w < this.capacity - top ? permits * this.w : this.capacity - top;
    this.level += given;
    for (const r of later) r.high += given;
    this.receipts.splice(i, 1);
    const previous = this.receipts[i - 1];
    if (previous !== undefined && receipt.high > previous.high) previous.high = receipt.high;
  }
}

interface BigReceipt {
  high: bigint;
}

const exact = ({ allowed, remaining, retryAfterMs, resetAfterMs }: Decision): Exact => ({
  allowed,
  remaining: BigInt(remaining),
  retryAfterMs: BigInt(retryAfterMs),
  resetAfterMs: BigInt(resetAfterMs),
});

/** Rules across the domain, most of them wide: limits near 2^53, windows near 2^42, and the edge of the wide plan. */
const ruleArb = fc
  .record({
    limit: fc.oneof(
      fc.constantFrom(1, 2, 3, 7, 1_000_000_007, 2 ** 52, 2 ** 52 - 1, 2 ** 51 + 1, MAX, MAX - 1),
      fc.integer({ min: 1, max: MAX }),
      fc.integer({ min: MAX - 1000, max: MAX }),
    ),
    windowMs: fc.oneof(fc.constantFrom(1, 2, 3, 1000, 86_400_000, 2 ** 42, 2 ** 42 - 1, 2 ** 41 + 1), fc.integer({ min: 1, max: 2 ** 42 })),
  })
  .map(({ limit, windowMs }) => new Rule(limit, windowMs));

type Op =
  | { readonly kind: 'acquire' | 'peek' | 'reserve'; readonly dt: number; readonly share: number }
  | { readonly kind: 'charge'; readonly dt: number; readonly share: number; readonly huge: boolean }
  | { readonly kind: 'settle'; readonly dt: number; readonly which: number; readonly share: number };

/** A step in time: nothing, a few ms, a fraction of the window (or two), or backwards. */
const dtArb = fc.oneof(fc.constant(0), fc.integer({ min: -3, max: 1000 }), fc.double({ min: -0.5, max: 2.2, noNaN: true }));
const shareArb = fc.oneof(fc.constantFrom(0, 1), fc.double({ min: 0, max: 1, noNaN: true }));
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constantFrom('acquire' as const, 'peek' as const, 'reserve' as const), dt: dtArb, share: shareArb }),
  fc.record({ kind: fc.constant('charge' as const), dt: dtArb, share: shareArb, huge: fc.boolean() }),
  fc.record({ kind: fc.constant('settle' as const), dt: dtArb, which: fc.nat(), share: shareArb }),
);

/** dt as a fraction of the window when not an integer, so that every part of a huge window is reached. */
const stepOf = (dt: number, windowMs: number) => (Number.isInteger(dt) ? dt : Math.trunc(dt * windowMs));
const permitsOf = (share: number, limit: number) => Math.max(1, Math.min(limit, Math.floor(share * limit)));
/** A charge: up to three limits, or anything up to 2^53 - 1. */
const chargeOf = (share: number, limit: number, huge: boolean) => Math.max(1, Math.min(MAX, Math.floor(share * (huge ? MAX : 3 * limit))));

describe.each([
  { name: 'TokenBucket', make: (rule: Rule) => new TokenBucket(rule) },
  { name: 'LeakyBucket', make: (rule: Rule) => new LeakyBucket(rule) },
])('$name accounts for every rule of the domain', ({ make }) => {
  test.prop([ruleArb, fc.constantFrom(0, 1_764_000_000_123, -5_000), fc.array(opArb, { maxLength: 30, size: 'max' })], { numRuns: 1000 })(
    'peek, charge, reserve and refund decide as the exact bucket, wide plans included',
    (rule, start, ops) => {
      const { limit, windowMs } = rule;
      const bucket = make(rule);
      const model = new BigBucket(BigInt(limit), BigInt(windowMs));
      const held: { receipt: Receipt; model: NonNullable<ReturnType<BigBucket['reserve']>['receipt']>; permits: number }[] = [];
      let now = start;
      for (const op of ops) {
        now += stepOf(op.dt, windowMs);
        const t = BigInt(now);
        if (op.kind === 'acquire') expect(exact(bucket.tryAcquire(now, permitsOf(op.share, limit)))).toEqual(model.decide(t, BigInt(permitsOf(op.share, limit)), true));
        else if (op.kind === 'peek') {
          const permits = op.share === 0 ? 0 : permitsOf(op.share, limit);
          expect(exact(bucket.peek(now, permits))).toEqual(model.decide(t, BigInt(permits), false));
        } else if (op.kind === 'charge') {
          const permits = chargeOf(op.share, limit, op.huge);
          expect(exact(bucket.charge(now, permits))).toEqual(model.charge(t, BigInt(permits)));
        } else if (op.kind === 'reserve') {
          const permits = permitsOf(op.share, limit);
          const { decision, receipt } = bucket.reserve(now, permits);
          const expected = model.reserve(t, BigInt(permits));
          expect(exact(decision)).toEqual(expected.decision);
          if (receipt !== undefined && expected.receipt !== undefined) held.push({ receipt, model: expected.receipt, permits });
          else expect(receipt).toBe(expected.receipt);
        } else if (op.kind === 'settle' && held.length > 0) {
          const [reservation] = held.splice(op.which % held.length, 1);
          const { receipt, model: modelReceipt, permits } = reservation as (typeof held)[number];
          const back = Math.floor(op.share * permits);
          bucket.refund(now, receipt, back);
          model.refund(t, modelReceipt, BigInt(back));
        }
        expect(exact(bucket.peek(now, 0))).toEqual(model.decide(t, 0n, false));
        expect(bucket.isIdle(now)).toBe(model.levelAt(model.at(t)) === model.capacity);
      }
    },
  );
});

/** Wide rules only: each bucket spans more than 2^53 scaled units. */
const wideRuleArb = ruleArb.filter(({ limit, windowMs }) => {
  const g = BigInt(gcdOf(limit, windowMs));
  return 2n * BigInt(limit) * (BigInt(windowMs) / g) > BigInt(MAX);
});

function gcdOf(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

describe('wide rules, through a keyed limiter', () => {
  const history = (rule: Rule) =>
    fc.array(
      fc.record({ dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 1000 }), fc.double({ min: 0, max: 1.5, noNaN: true })), share: shareArb, charge: fc.boolean() }).map(({ dt, share, charge }) => ({
        dt: stepOf(dt, rule.windowMs),
        permits: charge ? chargeOf(share, rule.limit, false) : permitsOf(share, rule.limit),
        charge,
      })),
      { maxLength: 12 },
    );
  const caseArb = wideRuleArb.chain((rule) => fc.record({ rule: fc.constant(rule), history: history(rule), share: shareArb, delay: fc.integer({ min: 0, max: 2 ** 42 }) }));

  const build = (rule: Rule, steps: readonly { dt: number; permits: number; charge: boolean }[]) => {
    const clock = new ManualClock(1_764_000_000_123);
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock });
    for (const { dt, permits, charge } of steps) {
      clock.advance(dt);
      if (charge) limiter.charge('k', permits);
      else limiter.tryAcquire('k', permits);
    }
    return { limiter, clock };
  };

  test.prop([caseArb, fc.array(fc.tuple(fc.integer({ min: 0, max: 1000 }), shareArb), { maxLength: 8 })])(
    'a reservation cancelled with nothing else on the key leaves every later decision the twin\'s, whatever the delay',
    ({ rule, history: steps, share, delay }, probes) => {
      const real = build(rule, steps);
      const twin = build(rule, steps);
      const reservation = real.limiter.reserve('k', permitsOf(share, rule.limit));
      real.clock.advance(delay);
      twin.clock.advance(delay);
      reservation.cancel();
      for (const [dt, s] of probes) {
        real.clock.advance(dt);
        twin.clock.advance(dt);
        expect(real.limiter.tryAcquire('k', permitsOf(s, rule.limit))).toEqual(twin.limiter.tryAcquire('k', permitsOf(s, rule.limit)));
      }
    },
  );

  test.prop([caseArb, fc.array(fc.record({ dt: fc.integer({ min: 0, max: 2 ** 40 }), share: shareArb }), { maxLength: 6 }), shareArb])(
    'a late refund never leaves the key better off than a twin given the same grants',
    ({ rule, history: steps, share }, between, back) => {
      const real = build(rule, steps);
      const twin = build(rule, steps);
      const permits = permitsOf(share, rule.limit);
      const reservation = real.limiter.reserve('k', permits);
      if (!reservation.decision.allowed) return;
      for (const { dt, share: s } of between) {
        real.clock.advance(dt);
        twin.clock.advance(dt);
        const q = permitsOf(s, rule.limit);
        if (real.limiter.tryAcquire('k', q).allowed) twin.limiter.charge('k', q);
      }
      reservation.settle(Math.floor(back * permits));
      for (const p of [1, 2, permitsOf(0.5, rule.limit), rule.limit]) {
        const [r, t] = [real.limiter.peek('k', p), twin.limiter.peek('k', p)];
        if (t.allowed) {
          if (r.allowed) expect(r.remaining).toBeLessThanOrEqual(t.remaining);
        } else {
          expect(r.allowed).toBe(false);
          expect(r.retryAfterMs).toBeGreaterThanOrEqual(t.retryAfterMs);
        }
      }
    },
  );

  test.prop([caseArb, fc.oneof(fc.constant(MAX), fc.integer({ min: 1, max: MAX }))])(
    'a charge never takes the key more than one limit into debt: refused for at most two windows, retryAfterMs exact, then as new',
    ({ rule, history: steps }, permits) => {
      const charged = build(rule, steps);
      const decision = charged.limiter.charge('k', permits);
      expect(decision).toMatchObject({ allowed: true, limit: rule.limit });
      expect(Number.isSafeInteger(decision.remaining) && decision.remaining >= 0).toBe(true);
      expect(decision.resetAfterMs).toBeLessThanOrEqual(2 * rule.windowMs);
      const refused = charged.limiter.tryAcquire('k', 1);
      if (!refused.allowed) {
        const early = build(rule, steps);
        early.limiter.charge('k', permits);
        early.clock.advance(refused.retryAfterMs - 1);
        expect(early.limiter.tryAcquire('k', 1).allowed).toBe(false);
        charged.clock.advance(refused.retryAfterMs);
        expect(charged.limiter.peek('k', 1).allowed).toBe(true);
      }
      const late = build(rule, steps);
      late.limiter.charge('k', permits);
      late.clock.advance(decision.resetAfterMs);
      expect(late.limiter.tryAcquire('k', rule.limit)).toMatchObject({ allowed: true, remaining: 0 });
    },
  );
});

describe('rules at the ends of the domain', () => {
  it.each([
    ['2^53 - 1 per ms', MAX, 1],
    ['2^53 - 1 per 2^42 ms', MAX, 2 ** 42],
    ['1 per 2^42 ms', 1, 2 ** 42],
    ['1e9 per day', 1_000_000_000, 86_400_000],
    ['2^52 - 1 per 3 ms (past 2^53 only in debt)', 2 ** 52 - 1, 3],
  ])('%s: charge of 2^53 - 1, then reserve, cancel and a refund after refill, as the exact bucket', (_name, limit, windowMs) => {
    const bucket = new TokenBucket(new Rule(limit, windowMs));
    const model = new BigBucket(BigInt(limit), BigInt(windowMs));
    const t0 = 1_764_000_000_123;
    expect(exact(bucket.charge(t0, MAX))).toEqual(model.charge(BigInt(t0), BigInt(MAX)));
    for (const dt of [0, 1, windowMs / 2, windowMs]) {
      const at = t0 + Math.floor(dt);
      const { decision, receipt } = bucket.reserve(at, limit);
      const expected = model.reserve(BigInt(at), BigInt(limit));
      expect(exact(decision)).toEqual(expected.decision);
      expect(exact(bucket.peek(at, 1))).toEqual(model.decide(BigInt(at), 1n, false));
      if (receipt === undefined || expected.receipt === undefined) continue;
      bucket.refund(at + 1, receipt, limit - 1);
      model.refund(BigInt(at + 1), expected.receipt, BigInt(limit - 1));
      expect(exact(bucket.peek(at + 1, 0))).toEqual(model.decide(BigInt(at + 1), 0n, false));
    }
  });
});

it('a bucket past 2^52 units in debt retries exactly: found by a search against the exact bucket (twice the capacity passes 2^53)', () => {
  const rule = new Rule(6_403_917_959_422_366, 2);
  const bucket = new TokenBucket(rule);
  const model = new BigBucket(BigInt(rule.limit), 2n);
  for (const at of [1, 1]) expect(exact(bucket.charge(at, MAX))).toEqual(model.charge(BigInt(at), BigInt(MAX)));
  for (const [at, permits] of [[2, 3_201_958_979_711_183], [3, 3_201_958_979_711_182], [4, rule.limit]] as const) {
    expect(exact(bucket.tryAcquire(at, permits))).toEqual(model.decide(BigInt(at), BigInt(permits), true));
  }
  expect(bucket.peek(4, rule.limit)).toMatchObject({ allowed: false, retryAfterMs: 1 });
});
