// src/redis/protocol.ts: what the scripts are sent and how their replies read, and a batch whose
// calls are under several rules deciding, call by call, as the same calls sent one by one.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { Rule } from '../../src/index';
import { batchArguments, batchDecisions, type BatchCall, legacySplit, operationArguments, ownRule } from '../../src/redis/protocol';
import { plans } from '../../src/redis/scripts';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

const call = (key: string, rule: Rule, amount = 1, now = 0): BatchCall => ({ key, rule, amount, now });

describe('batchArguments', () => {
  test('calls under one rule send it once, and permits of 1 not at all, as before rules travelled per call', () => {
    const rule = Rule.perMinute(10);
    expect(batchArguments([call('a', rule), call('b', new Rule(10, 60_000))], 'n:', 7, false)).toEqual({ keys: ['n:a', 'n:b'], args: ['7', '10', '60000'] });
    expect(batchArguments([call('a', rule, 2), call('b', rule)], '', 7, false).args).toEqual(['7', '10', '60000', '2', '1']);
    expect(batchArguments([call('a', rule, 1, 5.5), call('b', rule, 1, 6)], '', 0, true).args).toEqual(['0', '10', '60000', '1', '1', '5.5', '6']);
  });

  test('calls under several rules send each distinct rule once and each call its rule', () => {
    const a = Rule.perMinute(10);
    const b = Rule.perSecond(3);
    expect(batchArguments([call('x', a), call('y', b), call('z', a)], '', 4, false).args).toEqual(['-2', '4', '10', '60000', '3', '1000', '1', '2', '1']);
  });

  test('an operation names itself first, then its reading, split and rule', () => {
    expect(operationArguments('k', 'refund', '12', 3, Rule.perMinute(10), ['2', '99'])).toEqual({ keys: ['k'], args: ['refund', '12', '3', '10', '60000', '2', '99'] });
  });

  test('the split counts bytes, not characters', () => {
    expect(legacySplit('ключ:')).toBe(9);
  });

  test('a reply reads each decision with its own rule’s limit; a reply of another shape throws', () => {
    const calls = [call('a', Rule.perMinute(10)), call('b', Rule.perSecond(3)), call('c', Rule.perSecond(3))];
    const [a, b, c] = batchDecisions(['A 9 6000', 'R 0 300 1000', 'E boom'], calls);
    expect(a).toMatchObject({ allowed: true, limit: 10, remaining: 9 });
    expect(b).toMatchObject({ allowed: false, limit: 3, retryAfterMs: 300 });
    expect(String(c)).toContain('boom');
    expect(() => batchDecisions(['A 9 6000'], calls)).toThrow(/unexpected reply/);
    expect(() => batchDecisions(['A 9 6000', 'X', 'A 1 1'], calls)).toThrow(/unexpected reply/);
  });

  test('a refund on a key under another rule names that rule first; anything else starting so is no reply of ours', () => {
    expect(ownRule('A 9 6000')).toEqual({ rule: undefined, rest: 'A 9 6000' });
    expect(ownRule(`S${Number.MAX_SAFE_INTEGER}/${Rule.MAX_WINDOW_MS} R 0 300 1000`)).toEqual({ rule: new Rule(Number.MAX_SAFE_INTEGER, Rule.MAX_WINDOW_MS), rest: 'R 0 300 1000' });
    for (const reply of ['S4/30000', 'S0/30000 A 1 1', `S${2 ** 53}/1 A 1 1`, 'S4/-1 A 1 1', 'S4.5/10 A 1 1']) expect(() => ownRule(reply)).toThrow(/unexpected reply/);
  });
});

const rules = fc.array(fc.record({ limit: fc.integer({ min: 1, max: 10 }), windowMs: fc.integer({ min: 1_000, max: 60_000 }) }), { minLength: 2, maxLength: 3 });
const calls = fc.array(fc.record({ key: fc.constantFrom('a', 'b'), rule: fc.nat({ max: 2 }), share: fc.double({ min: 0, max: 1, noNaN: true }), moveMs: fc.integer({ min: 0, max: 3_000 }) }), {
  minLength: 1,
  maxLength: 16,
});

describe.skipIf(!redisPort)('a batch under several rules', () => {
  const redis = useIoredis();
  for (const algorithm of algorithmNames) {
    test.prop([rules, calls], { numRuns: 20 })(`${algorithm}: decides each call as the same calls sent one by one`, async (chosen, made) => {
      const { script } = plans[algorithm];
      const ruleOf = (index: number) => {
        const { limit, windowMs } = chosen[index % chosen.length]!;
        return new Rule(limit, windowMs);
      };
      let now = 1_700_000_000_000;
      const prepared = made.map(({ key, rule, share, moveMs }) => {
        now += moveMs;
        const r = ruleOf(rule);
        return { key, rule: r, permits: 1 + Math.floor(share * (r.limit - 1)), now };
      });
      const together = uniquePrefix('together');
      const alone = uniquePrefix('alone');
      const send = (batch: BatchCall[]) => {
        const { keys, args } = batchArguments(batch, '', 0, true);
        return redis.eval(script.source, keys.length, ...keys, ...args);
      };
      const batched = await send(prepared.map((c) => call(together + c.key, c.rule, c.permits, c.now)));
      const oneByOne: unknown[] = [];
      for (const c of prepared) oneByOne.push(...((await send([call(alone + c.key, c.rule, c.permits, c.now)])) as unknown[]));
      expect(batched).toEqual(oneByOne);
    });
  }
});
