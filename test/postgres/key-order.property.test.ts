// The laws of src/postgres/key-order.ts, over random interleavings of calls made, batches coming
// back (answered, failed, or with calls skipped because another transaction held their row) and
// calls answered by their timeout while they waited.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { KeyOrder } from '../../src/postgres/key-order';

interface TestCall {
  readonly id: number;
  readonly key: string;
  readonly op: 'peek' | 'decide';
  answered: boolean;
}

const event = fc.oneof(
  fc.record({ kind: fc.constant('add' as const), keys: fc.array(fc.record({ key: fc.constantFrom('a', 'b', 'c', 'd'), op: fc.boolean() }), { minLength: 1, maxLength: 6 }) }),
  fc.record({ kind: fc.constant('done' as const), pick: fc.nat(), outcome: fc.constantFrom('answered', 'skipped') }),
  fc.record({ kind: fc.constant('timeout' as const), pick: fc.nat() }),
);

describe('KeyOrder', () => {
  test.prop([fc.array(event, { maxLength: 60 })], { numRuns: 300 })(
    'a call waits only while a batch holding its key is out; a key reaches the store in the order its calls were made; a key held elsewhere goes again alone',
    (events) => {
      const out: TestCall[][] = [];
      const sentOrder = new Map<string, number[]>();
      const alone = new Set<string>();
      const order = new KeyOrder<TestCall>((batch) => {
        const keys = new Set(batch.map((call) => call.key));
        // Never two batches out with one key, and never more than the batch size.
        for (const other of out) for (const call of other) expect(keys.has(call.key)).toBe(false);
        expect(batch.length).toBeLessThanOrEqual(4);
        if (batch.some((call) => call.op !== 'decide' || alone.has(call.key))) expect(batch).toHaveLength(1);
        for (const call of batch) {
          expect(call.answered).toBe(false);
          sentOrder.set(call.key, [...(sentOrder.get(call.key) ?? []), call.id]);
        }
        out.push(batch);
      }, 4);
      const made: TestCall[] = [];
      let id = 0;
      for (const e of events) {
        if (e.kind === 'add') {
          const calls = e.keys.map(({ key, op }) => ({ id: id++, key, op: op ? ('peek' as const) : ('decide' as const), answered: false }));
          made.push(...calls);
          order.add(calls);
        } else if (e.kind === 'timeout') {
          if (made.length > 0) made[e.pick % made.length]!.answered = true;
        } else if (out.length > 0) {
          const [batch] = out.splice(e.pick % out.length, 1);
          // Skipped: the batch's first key's calls, as the many-keys function skips a held key's calls.
          const skipped = e.outcome === 'skipped' && batch!.every((call) => call.op === 'decide') ? batch!.filter((call) => call.key === batch![0]!.key) : [];
          for (const call of batch!) alone.delete(call.key);
          for (const call of skipped) alone.add(call.key);
          // A skipped call is sent again: count its id out of the order until then.
          for (const call of skipped) sentOrder.get(call.key)!.splice(sentOrder.get(call.key)!.lastIndexOf(call.id), 1);
          order.done(batch!, skipped);
        }
        // Whatever waits has its key out: no unanswered call waits while its key is free.
        const keysOut = new Set(out.flat().map((call) => call.key));
        const sent = new Set(out.flat().map((call) => call.id));
        for (const call of made) {
          if (call.answered || sent.has(call.id) || keysOut.has(call.key)) continue;
          expect(sentOrder.get(call.key) ?? []).toContain(call.id);
        }
      }
      for (const ids of sentOrder.values()) expect(ids).toEqual([...ids].sort((x, y) => x - y));
    },
  );
});
