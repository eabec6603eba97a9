// How a script's reply becomes decisions: exactly what the script wrote, and nothing that is not
// a reply of ours (a wrongly wired adapter or a foreign script fails as a store error instead).
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { allow, reject } from '../../src/core/decision';
import { Rule } from '../../src/core/rule';
import { batchDecisions } from '../../src/redis/protocol';

/** A whole number as the scripts write it with '%.17g': plain digits below 2^53. */
const whole = fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }));
const written = (n: number) => n.toFixed(0);
const limit = Number.MAX_SAFE_INTEGER;

/** The decisions of a reply to `count` calls under a rule of `limit` permits. */
const readReply = (reply: unknown, count: number, limit: number) =>
  batchDecisions(reply, Array.from({ length: count }, () => ({ key: 'k', amount: 1, now: 0, rule: new Rule(limit, 1000) })));

describe('batchDecisions', () => {
  test.prop([whole, whole])('an allowance reads back exactly', (remaining, reset) => {
    expect(readReply([`A ${written(remaining)} ${written(reset)}`], 1, limit)).toEqual([allow(limit, remaining, reset)]);
  });

  test.prop([whole, whole.filter((n) => n >= 1), whole])('a refusal reads back exactly', (remaining, retry, reset) => {
    expect(readReply([`R ${written(remaining)} ${written(retry)} ${written(reset)}`], 1, limit)).toEqual([reject(limit, remaining, retry, reset)]);
  });

  test('each entry of a batch is its own decision, and a failed key its own error', () => {
    const [a, e, r] = readReply(['A 3 1000', 'E WRONGTYPE Operation against a key holding the wrong kind of value', 'R 0 250 1000'], 3, 4);
    expect(a).toEqual(allow(4, 3, 1000));
    expect(String(e)).toBe('Error: ratekeeper: Redis failed on this key: WRONGTYPE Operation against a key holding the wrong kind of value');
    expect(r).toEqual(reject(4, 0, 250, 1000));
  });

  test.each([
    ['a number past 2^53 - 1, which a double would round', 'A 9007199254740993 1'],
    ['an exponent', 'A 1e3 1'],
    ['a hexadecimal number', 'A 0x10 1'],
    ['a sign', 'A -1 1'],
    ['a fraction', 'A 1.5 1'],
    ['an empty field', 'A  1'],
    ['a trailing space', 'A 1 1 '],
    ['a field too few', 'A 1'],
    ['a field too many', 'A 1 1 1'],
    ['a refusal with a field too few', 'R 0 1'],
    ['a refusal that waits 0 ms', 'R 0 0 1'],
    ['an unknown kind', 'X 1 1'],
    ['no kind', '1 1'],
  ])('refuses %s', (_, entry) => {
    expect(() => readReply([entry], 1, limit)).toThrow(`ratekeeper: unexpected reply from Redis: ${JSON.stringify(entry)}`);
  });

  test.each([
    ['no array', 'A 1 1'],
    ['too few entries', ['A 1 1']],
    ['an entry that is no string', [1, 'A 1 1']],
  ])('refuses a reply with %s', (_, reply) => {
    expect(() => readReply(reply, 2, limit)).toThrow(/^ratekeeper: unexpected reply from Redis/);
  });
});
