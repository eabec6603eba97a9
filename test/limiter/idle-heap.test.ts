// src/limiter/idle-heap.ts: a full key table's keys in the order they could go idle, in lanes for
// new keys (each in time order) and a heap for the rest.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import type { RateLimitAlgorithm } from '../../src/algorithms/algorithm';
import { TokenBucket } from '../../src/algorithms/token-bucket';
import { Rule } from '../../src/core/rule';
import { IdleHeap } from '../../src/limiter/idle-heap';

const state = new TokenBucket(Rule.perSecond(1)) as RateLimitAlgorithm;

type Op = { kind: 'queue' | 'push'; at: number } | { kind: 'pop' } | { kind: 'retain'; modulo: number } | { kind: 'due'; now: number };

const time = fc.oneof(fc.integer({ min: 0, max: 50 }), fc.double({ min: 0, max: 50, noNaN: true }));
const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant('queue' as const), at: time }), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant('push' as const), at: time }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant('pop' as const) }), weight: 3 },
  { arbitrary: fc.record({ kind: fc.constant('retain' as const), modulo: fc.integer({ min: 2, max: 5 }) }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('due' as const), now: time }), weight: 2 },
);

describe('IdleHeap', () => {
  // Keys name their entry (`n@at`), so the model is a list of them; the heap must give back the
  // earliest `at` each time (ties in any order), whether the entry went to a lane or to the heap.
  test.prop([fc.array(op, { maxLength: 400 }), fc.integer({ min: 0, max: 2000 })])(
    'pops entries earliest first, answers whether one is due, and retains exactly the live ones, as a sorted list does',
    (ops, bulk) => {
      const heap = new IdleHeap();
      const model: { key: string; at: number }[] = [];
      let n = 0;
      const add = (kind: 'queue' | 'push', at: number) => {
        const key = `${n++}@${at}`;
        heap[kind](at, key, state);
        model.push({ key, at });
      };
      // Enough in-order entries first to make a lane wrap around and grow.
      for (let i = 0; i < bulk; i++) add('queue', i / 40);
      for (const o of ops) {
        if (o.kind === 'queue' || o.kind === 'push') add(o.kind, o.at);
        else if (o.kind === 'due') expect(heap.hasDue(o.now)).toBe(model.some((e) => e.at <= o.now));
        else if (o.kind === 'retain') {
          const live = (key: string) => Number(key.split('@')[0]) % o.modulo !== 0;
          heap.retain(live);
          model.splice(0, model.length, ...model.filter((e) => live(e.key)));
        } else if (model.length > 0) {
          const earliest = Math.min(...model.map((e) => e.at));
          const { key, state: popped } = heap.pop();
          expect(popped).toBe(state);
          const at = Number(key.split('@')[1]);
          expect(at).toBe(earliest);
          model.splice(model.findIndex((e) => e.key === key), 1);
        }
        expect(heap.size).toBe(model.length);
      }
      const rest: number[] = [];
      while (heap.size > 0) rest.push(Number(heap.pop().key.split('@')[1]));
      expect(rest).toEqual(model.map((e) => e.at).sort((a, b) => a - b));
      expect(heap.hasDue(Infinity)).toBe(false);
    },
  );

  it('gives back the new keys of five rules arriving interleaved in time order (more rules than lanes)', () => {
    // Each rule's entries arrive in time order: four rules get a lane each, the fifth overflows to
    // the heap, and every entry still comes out in time order.
    const heap = new IdleHeap();
    const delays = [500, 60_000, 1_000, 3_600_000, 10];
    for (let now = 0; now < 1000; now++) for (const delay of delays) heap.queue(now + delay, `${now}+${delay}`, state);
    const ats: number[] = [];
    while (heap.size > 0) {
      const [now, delay] = heap.pop().key.split('+').map(Number) as [number, number];
      ats.push(now + delay);
    }
    expect(ats).toEqual([...ats].sort((a, b) => a - b));
    expect(ats).toHaveLength(5000);
  });
});
