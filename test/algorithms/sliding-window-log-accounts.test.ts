// The sliding log keeps one entry per grant (issue 17 item 5); its accounts (issue 13) must decide
// exactly as a log of one time per permit would. The twin below is that log, written plainly.
import { describe, expect, it } from 'vitest';
import { Rule, SlidingWindowLog } from '../../src/index';
import type { Receipt } from '../../src/algorithms/accounting';
import { allow, reject, type Decision } from '../../src/core/decision';

/** One time per permit, in order; debt up to one extra limit, as `DEBT_LIMITS` says. */
class PerPermitLog {
  times: number[] = [];
  forgiven = 0;
  constructor(readonly limit: number, readonly windowMs: number) {}
  readAt(nowMs: number): number {
    const newest = this.times.at(-1);
    return newest !== undefined && newest > nowMs ? newest : nowMs;
  }
  live(now: number): number[] {
    return this.times.filter((t) => t > now - this.windowMs);
  }
  decide(nowMs: number, permits: number, spend: boolean): Decision {
    const now = this.readAt(nowMs);
    const live = this.live(now);
    const newest = this.times.at(-1) ?? -Infinity;
    if (live.length + permits > this.limit) {
      const leaving = live[live.length + permits - this.limit - 1] as number;
      const retry = Math.max(1, Math.ceil(leaving + this.windowMs - now));
      const remaining = Math.max(0, this.limit - live.length);
      const reset = Math.max(retry, Math.ceil(newest + this.windowMs - now));
      return permits === 0 ? allow(this.limit, remaining, reset) : reject(this.limit, remaining, retry, reset);
    }
    if (spend) this.times = [...live, ...Array<number>(permits).fill(now)];
    if (permits === 0) {
      return allow(this.limit, this.limit - live.length, live.length === 0 ? 0 : Math.max(1, Math.ceil(newest + this.windowMs - now)));
    }
    return allow(this.limit, this.limit - live.length - permits, this.windowMs);
  }
  charge(nowMs: number, permits: number): Decision {
    const now = this.readAt(nowMs);
    const live = this.live(now);
    const bound = 2 * this.limit;
    if (live.length + permits > bound) this.forgiven++;
    // Past the bound the oldest permits are forgiven: the newest `bound` stay.
    this.times = [...live, ...Array<number>(Math.min(permits, bound)).fill(now)].slice(-bound);
    const newest = this.times.at(-1) as number;
    return allow(this.limit, Math.max(0, this.limit - this.times.length), Math.ceil(newest + this.windowMs - now));
  }
  refund(nowMs: number, at: number, forgiven: number, permits: number): void {
    if (forgiven !== this.forgiven || at + this.windowMs <= this.readAt(nowMs)) return;
    let removed = 0;
    for (let i = this.times.length - 1; i >= 0 && removed < permits; i--) {
      if (this.times[i] === at) {
        this.times.splice(i, 1);
        removed++;
      }
    }
  }
}

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('SlidingWindowLog accounts, one entry per grant, against a log of one time per permit', () => {
  for (const [limit, windowMs] of [[1, 10], [3, 10], [5, 100], [8, 7]] as const) {
    it(`decides every operation as the twin does (${limit} per ${windowMs} ms, 3000 random operations)`, () => {
      for (let seed = 1; seed <= 5; seed++) {
        const next = random(seed * 31 + limit);
        const log = new SlidingWindowLog(new Rule(limit, windowMs));
        const twin = new PerPermitLog(limit, windowMs);
        const receipts: { receipt: Receipt; at: number; forgiven: number }[] = [];
        let now = 0;
        for (let step = 0; step < 3000; step++) {
          // Mostly forward, sometimes a reading from the past (no time passing) or a repeat.
          now += Math.floor(next() * 4) - (next() < 0.1 ? 3 : 0);
          const permits = 1 + Math.floor(next() * limit);
          const op = next();
          const where = `seed ${seed}, step ${step}, now ${now}`;
          if (op < 0.3) {
            const reserved = log.reserve(now, permits);
            expect(reserved.decision, where).toEqual(twin.decide(now, permits, true));
            if (reserved.receipt !== undefined) receipts.push({ receipt: reserved.receipt, at: twin.readAt(now), forgiven: twin.forgiven });
          } else if (op < 0.45) {
            const charged = 1 + Math.floor(next() * 3 * limit);
            expect(log.charge(now, charged), where).toEqual(twin.charge(now, charged));
          } else if (op < 0.7 && receipts.length > 0) {
            const { receipt, at, forgiven } = receipts[Math.floor(next() * receipts.length)]!;
            log.refund(now, receipt, permits);
            twin.refund(now, at, forgiven, permits);
          } else if (op < 0.85) {
            expect(log.peek(now, 0), where).toEqual(twin.decide(now, 0, false));
          } else {
            expect(log.peek(now, permits), where).toEqual(twin.decide(now, permits, false));
          }
          expect(log.isIdle(now + windowMs), where).toBe(twin.live(twin.readAt(now + windowMs)).length === 0);
        }
      }
    });
  }

  it('a refund of an older grant shared by two reservations at one reading takes from that entry only', () => {
    const log = new SlidingWindowLog(Rule.perSecond(10));
    const first = log.reserve(0, 3).receipt!;
    log.reserve(0, 2);
    log.reserve(400, 4);
    log.refund(500, first, 4); // the entry at 0 holds 5; 4 of them come back
    expect(log.peek(500, 0).remaining).toBe(10 - 1 - 4);
    expect(log.peek(1000, 0).remaining).toBe(10 - 4); // the 1 left at 0 has gone
    log.refund(1000, first, 1); // its entry has left the window: nothing
    expect(log.peek(1000, 0).remaining).toBe(6);
  });

  it('debt holds twice the limit in entries, one per charge at its own reading; past it the oldest are forgiven', () => {
    const log = new SlidingWindowLog(new Rule(3, 100));
    for (let t = 0; t < 8; t++) log.charge(t, 1);
    expect(log.peek(7, 0)).toEqual(allow(3, 0, 100)); // the newest 6 (the bound), at 2..7: as new at 107
    expect(log.tryAcquire(7).retryAfterMs).toBe(98); // four must leave: the fourth, at 5, leaves at 105
    expect(log.tryAcquire(104).allowed).toBe(false);
    expect(log.tryAcquire(105).allowed).toBe(true);
  });

  it('a key that spent more is never served before its twin: a charge past the bound forgives the oldest permits, not its own', () => {
    const log = new SlidingWindowLog(new Rule(5, 1000));
    const twin = new SlidingWindowLog(new Rule(5, 1000));
    const reservation = log.reserve(0, 1).receipt!;
    for (const at of [0, 1]) {
      log.charge(at, 5);
      twin.charge(at, 5);
    }
    log.refund(1, reservation, 1); // voided by the charge that reached the bound: nothing comes back
    expect(log.tryAcquire(1000)).toEqual(twin.tryAcquire(1000));
    expect(log.tryAcquire(1000).allowed).toBe(false);
    expect(log.peek(1001, 0)).toEqual(twin.peek(1001, 0));
  });
});
