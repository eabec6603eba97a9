import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import type { Decision } from '../../src/index';
import { rateLimitHeaders, type HeaderFormat, type PolicyDecision } from '../../src/http';
import { headerWriter } from '../../src/http/rate-limit-headers';
import { parseDictionary, parseItem, parseList, type Item, type Member } from './support/structured-fields';

const formats = fc.constantFrom<HeaderFormat>('draft-10', 'draft-7', 'draft-6', 'x-ratelimit');
const name = fc.stringMatching(/^[\x20-\x7e]{1,24}$/);
const windowMs = fc.option(fc.oneof(fc.integer({ min: 1, max: 1e12 }), fc.double({ min: 1e-3, max: 1e12, noNaN: true })), {
  nil: undefined,
});
/** Whole ms mostly, as the limiters give them; fractions and huge values as a custom limiter might. */
const ms = fc.oneof(fc.integer({ min: 0, max: 1e9 }), fc.double({ min: 0, max: 1e15, noNaN: true }));
const decision: fc.Arbitrary<Decision> = fc
  .record({ allowed: fc.boolean(), limit: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), share: fc.double({ min: 0, max: 1, noNaN: true }), wait: ms, reset: ms })
  .map(({ allowed, limit, share, wait, reset }) =>
    allowed
      ? { allowed, limit, remaining: Math.floor(limit * share), retryAfterMs: 0, resetAfterMs: reset }
      : { allowed, limit, remaining: Math.floor(limit * share), retryAfterMs: Math.max(1, wait), resetAfterMs: reset },
  );
const policies = fc.uniqueArray(fc.record({ decision, name, windowMs }), { minLength: 1, maxLength: 5, selector: (p) => p.name });

/** `t` is `ms` in whole seconds rounded up: the smallest integer number of seconds covering it. */
const expectRoundedUp = (t: unknown, ms: number) => {
  expect(typeof t).toBe('number');
  expect((t as number) * 1000 >= ms && ((t as number) - 1) * 1000 < ms, `${String(t)} s for ${ms} ms`).toBe(true);
};
const SF_MAX = 999_999_999_999_999;
const integer = (member: Member | undefined): number => {
  expect(member).toHaveProperty('value');
  const value = (member as Item).value;
  expect(Number.isSafeInteger(value) && (value as number) >= 0, `${String(value)} is a non-negative integer`).toBe(true);
  return value as number;
};
const DELAY_SECONDS = /^\d{1,15}$/;

/** The `t`/reset value in whichever field the format carries it. */
function resetOf(headers: Record<string, string>, format: HeaderFormat): number {
  if (format === 'draft-10') return integer({ value: parseList(headers.RateLimit ?? '')[0]?.params.get('t') ?? -1, params: new Map() });
  if (format === 'draft-7') return integer(parseDictionary(headers.RateLimit ?? '').get('reset'));
  return Number(headers[format === 'draft-6' ? 'RateLimit-Reset' : 'X-RateLimit-Reset']);
}

describe('rateLimitHeaders laws', () => {
  test.prop([decision, name, windowMs, formats])('the middleware writes for a decision exactly what rateLimitHeaders writes', (d, n, w, format) => {
    expect(headerWriter({ format, name: n, windowMs: w })(d)).toEqual(rateLimitHeaders(d, { format, name: n, windowMs: w }));
  });

  test.prop([decision, name, windowMs, formats])('every value is a non-negative integer of at most 15 digits', (d, n, w, format) => {
    const headers = rateLimitHeaders(d, { format, name: n, windowMs: w });
    for (const [field, value] of Object.entries(headers)) {
      // Apart from quoted names and lowercase keys, every token must be a plain integer.
      const tokens = value.replace(/"(?:[^"\\]|\\.)*"/g, ' ').split(/[\s,;=]+/).filter((token) => token !== '');
      for (const token of tokens) expect(token, `${field}: ${value}`).toMatch(/^([a-z]+|\d{1,15})$/);
    }
  });

  test.prop([decision, name, windowMs, formats])('Retry-After comes exactly with a refusal, and never before t', (d, n, w, format) => {
    const headers = rateLimitHeaders(d, { format, name: n, windowMs: w });
    expect('Retry-After' in headers).toBe(!d.allowed);
    if (d.allowed) return;
    expect(headers['Retry-After']).toMatch(DELAY_SECONDS);
    expect(Number(headers['Retry-After'])).toBeGreaterThanOrEqual(resetOf(headers, format));
    expectRoundedUp(Number(headers['Retry-After']), d.retryAfterMs);
  });

  test.prop([decision, name, windowMs])('draft-10 fields are Lists of sf-strings naming the policy, with integer parameters', (d, n, w) => {
    const headers = rateLimitHeaders(d, { name: n, windowMs: w });
    const [policy, ...morePolicies] = parseList(headers['RateLimit-Policy'] ?? '');
    const [limit, ...moreLimits] = parseList(headers.RateLimit ?? '');
    expect([morePolicies, moreLimits]).toEqual([[], []]);
    expect([(policy as Item).value, (limit as Item).value]).toEqual([n, n]);
    expect([...(policy?.params.keys() ?? [])]).toEqual(w === undefined ? ['q'] : ['q', 'w']);
    expect(integer({ value: policy?.params.get('q') ?? -1, params: new Map() })).toBe(Math.min(d.limit, SF_MAX));
    if (w !== undefined) expectRoundedUp(policy?.params.get('w'), Math.max(w, 1000));
    expect([...(limit?.params.keys() ?? [])]).toEqual(['r', 't']);
    expect(limit?.params.get('r')).toBe(Math.min(d.remaining, SF_MAX));
    expectRoundedUp(limit?.params.get('t'), d.allowed ? d.resetAfterMs : d.retryAfterMs);
  });

  test.prop([decision, windowMs])('draft-7 RateLimit is a Dictionary of limit, remaining and reset', (d, w) => {
    const headers = rateLimitHeaders(d, { format: 'draft-7', windowMs: w });
    const fields = parseDictionary(headers.RateLimit ?? '');
    expect([...fields.keys()]).toEqual(['limit', 'remaining', 'reset']);
    for (const member of fields.values()) integer(member);
    expect(integer(fields.get('remaining'))).toBeLessThanOrEqual(integer(fields.get('limit')));
  });

  test.prop([decision, windowMs, fc.constantFrom<HeaderFormat>('draft-7', 'draft-6')])(
    'draft-6/-7 RateLimit-Policy is a List of Integers with w, present exactly when the window is known',
    (d, w, format) => {
      const headers = rateLimitHeaders(d, { format, windowMs: w });
      expect('RateLimit-Policy' in headers).toBe(w !== undefined);
      if (w === undefined) return;
      const [policy, ...more] = parseList(headers['RateLimit-Policy'] ?? '');
      expect(more).toEqual([]);
      integer(policy);
      expect([...(policy?.params.keys() ?? [])]).toEqual(['w']);
      if (format === 'draft-6') for (const field of ['Limit', 'Remaining', 'Reset']) integer(parseItem(headers[`RateLimit-${field}`] ?? ''));
    },
  );

  test.prop([policies])('a composite limit lists every policy, reports the tightest and waits for the slowest refusal', (list) => {
    const headers = rateLimitHeaders(list as PolicyDecision[]);
    expect(parseList(headers['RateLimit-Policy'] ?? '').map((m) => (m as Item).value)).toEqual(list.map((p) => p.name));
    const [reported] = parseList(headers.RateLimit ?? '');
    const chosen = list.find((p) => p.name === (reported as Item).value);
    const refused = list.filter((p) => !p.decision.allowed);
    expect(chosen?.decision.allowed).toBe(refused.length === 0);
    const rivals = refused.length > 0 ? refused : list;
    // Structured-field integers stop at 10^15 - 1: past it every remaining count is written as that,
    // and two policies the header cannot tell apart are equally tight.
    const written = (remaining: number) => Math.min(Math.floor(remaining), 999_999_999_999_999);
    for (const rival of rivals) expect(written(chosen?.decision.remaining ?? Infinity)).toBeLessThanOrEqual(written(rival.decision.remaining));
    if (refused.length === 0) {
      expect(headers).not.toHaveProperty('Retry-After');
      return;
    }
    const slowest = Math.max(...refused.map((p) => p.decision.retryAfterMs));
    expectRoundedUp(Number(headers['Retry-After']), slowest);
    expect(Number(headers['Retry-After'])).toBeGreaterThanOrEqual(reported?.params.get('t') as number);
  });
});

describe('the structured-field parser used above', () => {
  test.prop([fc.constantFrom(
    '"burst";q=100;w=60,"daily";q=1000;w=86400',
    '"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:',
    '"default";r=50;t=30',
    '10;w=1;burst=1000, 1000;w=3600',
  )])('parses the drafts\' own examples', (example) => {
    expect(parseList(example).length).toBeGreaterThan(0);
  });

  test.prop([fc.constantFrom('"a";r=1,', '"a";r=1.', 'a=1', '"a\\n"', '1234567890123456', '"unterminated', '"a";Q=1')])(
    'rejects malformed lists',
    (bad) => {
      expect(() => parseList(bad)).toThrow(SyntaxError);
    },
  );
});
