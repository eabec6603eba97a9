// src/http/rate-limit-headers.ts: every format pinned to exact strings.
import { describe, expect, it } from 'vitest';
import type { Decision } from '../../src/index';
import { rateLimitHeaders, type HeaderFormat } from '../../src/http';
import { rangeError, typeError } from '../../src/core/errors';

const allowed: Decision = { allowed: true, limit: 100, remaining: 99, retryAfterMs: 0, resetAfterMs: 600 };
const refused: Decision = { allowed: false, limit: 100, remaining: 0, retryAfterMs: 1500, resetAfterMs: 60_000 };
const api = { name: 'api', windowMs: 60_000 };

describe('rateLimitHeaders: one policy, per format', () => {
  it.each<[HeaderFormat, Decision, Record<string, string>]>([
    ['draft-10', allowed, { 'RateLimit-Policy': '"api";q=100;w=60', RateLimit: '"api";r=99;t=1' }],
    ['draft-10', refused, { 'RateLimit-Policy': '"api";q=100;w=60', RateLimit: '"api";r=0;t=2', 'Retry-After': '2' }],
    ['draft-7', allowed, { 'RateLimit-Policy': '100;w=60', RateLimit: 'limit=100, remaining=99, reset=1' }],
    ['draft-7', refused, { 'RateLimit-Policy': '100;w=60', RateLimit: 'limit=100, remaining=0, reset=2', 'Retry-After': '2' }],
    ['draft-6', allowed, { 'RateLimit-Policy': '100;w=60', 'RateLimit-Limit': '100', 'RateLimit-Remaining': '99', 'RateLimit-Reset': '1' }],
    [
      'draft-6',
      refused,
      { 'RateLimit-Policy': '100;w=60', 'RateLimit-Limit': '100', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '2', 'Retry-After': '2' },
    ],
    ['x-ratelimit', allowed, { 'X-RateLimit-Limit': '100', 'X-RateLimit-Remaining': '99', 'X-RateLimit-Reset': '1' }],
    ['x-ratelimit', refused, { 'X-RateLimit-Limit': '100', 'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': '2', 'Retry-After': '2' }],
  ])('%s, allowed %#', (format, decision, expected) => {
    expect(rateLimitHeaders(decision, { format, ...api })).toEqual(expected);
  });

  it("defaults to draft-10 and the policy 'default', and leaves out what needs an unknown window", () => {
    expect(rateLimitHeaders(allowed)).toEqual({ 'RateLimit-Policy': '"default";q=100', RateLimit: '"default";r=99;t=1' });
    expect(rateLimitHeaders(allowed, { format: 'draft-7' })).toEqual({ RateLimit: 'limit=100, remaining=99, reset=1' });
    expect(rateLimitHeaders(allowed, { format: 'draft-6' })).not.toHaveProperty('RateLimit-Policy');
  });

  it('escapes the policy name as a structured-field string', () => {
    expect(rateLimitHeaders(allowed, { name: 'say "hi" \\o/' }).RateLimit).toBe('"say \\"hi\\" \\\\o/";r=99;t=1');
  });

  it.each([
    ['a window under a second counts as one', { windowMs: 1 }, allowed, 'RateLimit-Policy', '"default";q=100;w=1'],
    ['a window rounds up to whole seconds', { windowMs: 1500 }, allowed, 'RateLimit-Policy', '"default";q=100;w=2'],
    ['a full quota has t=0', {}, { ...allowed, remaining: 100, resetAfterMs: 0 }, 'RateLimit', '"default";r=100;t=0'],
    ['a wait of 1 ms is 1 s', {}, { ...refused, retryAfterMs: 1 }, 'Retry-After', '1'],
    ['a wait of 1000 ms is 1 s', {}, { ...refused, retryAfterMs: 1000 }, 'Retry-After', '1'],
    ['a wait of 1001 ms is 2 s', {}, { ...refused, retryAfterMs: 1001 }, 'Retry-After', '2'],
    ['fractions from a custom limiter round safely', {}, { ...allowed, remaining: 2.5, resetAfterMs: 0.2 }, 'RateLimit', '"default";r=2;t=1'],
    [
      'a limit beyond 15 digits is capped to what a structured field can carry',
      {},
      { ...allowed, limit: Number.MAX_SAFE_INTEGER },
      'RateLimit-Policy',
      '"default";q=999999999999999',
    ],
  ])('%s', (_, options, decision, field, value) => {
    expect(rateLimitHeaders(decision as Decision, options)[field]).toBe(value);
  });
});

describe('rateLimitHeaders: composite limits', () => {
  const minute = (decision: Partial<Decision>) => ({
    name: 'minute',
    windowMs: 60_000,
    decision: { ...allowed, limit: 10, remaining: 5, resetAfterMs: 30_000, ...decision } as Decision,
  });
  const day = (decision: Partial<Decision>) => ({
    name: 'day',
    windowMs: 86_400_000,
    decision: { ...allowed, limit: 1000, remaining: 2, resetAfterMs: 36_000_000, ...decision } as Decision,
  });

  it('lists every policy and reports the one with the fewest remaining', () => {
    expect(rateLimitHeaders([minute({}), day({})])).toEqual({
      'RateLimit-Policy': '"minute";q=10;w=60, "day";q=1000;w=86400',
      RateLimit: '"day";r=2;t=36000',
    });
    expect(rateLimitHeaders([minute({}), day({})], { format: 'draft-6' })).toEqual({
      'RateLimit-Policy': '10;w=60, 1000;w=86400',
      'RateLimit-Limit': '1000',
      'RateLimit-Remaining': '2',
      'RateLimit-Reset': '36000',
    });
  });

  it('reports a refusing policy first, and waits for the slowest refusal', () => {
    const headers = rateLimitHeaders([
      minute({ allowed: false, remaining: 0, retryAfterMs: 4000 }),
      day({ allowed: false, remaining: 1, retryAfterMs: 90_000 }),
      { name: 'second', windowMs: 1000, decision: { ...allowed, limit: 5, remaining: 0, resetAfterMs: 1000 } },
    ]);
    expect(headers.RateLimit).toBe('"minute";r=0;t=4');
    expect(headers['Retry-After']).toBe('90');
  });

  it('breaks a tie in remaining by the longer wait', () => {
    expect(rateLimitHeaders([minute({ remaining: 2 }), day({})]).RateLimit).toBe('"day";r=2;t=36000');
  });

  it.each<[string, unknown, Error]>([
    ['an empty list', [], rangeError('ratekeeper: `policies` must hold at least one policy, got an empty array')],
    [
      'a repeated name',
      [minute({}), { ...day({}), name: 'minute' }],
      rangeError('ratekeeper: `policies[1].name` repeats "minute"; each policy needs its own name'),
    ],
    ['a list entry that is no object', [minute({}), null], typeError('ratekeeper: `policies[1]` must be an object, got null')],
    [
      'a bad decision in the list',
      [minute({ remaining: -1 })],
      rangeError('ratekeeper: `policies[0].decision.remaining` must be a finite number of at least 0, got -1'),
    ],
  ])('refuses %s', (_, policies, error) => {
    expect(() => rateLimitHeaders(policies as never)).toThrow(error);
  });

  it('refuses two draft-7 policies with the same limit, which that draft forbids', () => {
    expect(() => rateLimitHeaders([minute({}), day({ limit: 10 })], { format: 'draft-7' })).toThrow(
      rangeError("ratekeeper: draft-7 cannot list two policies with the same limit; use 'draft-10', which names them"),
    );
    expect(rateLimitHeaders([minute({}), day({ limit: 10 })])['RateLimit-Policy']).toBe('"minute";q=10;w=60, "day";q=10;w=86400');
  });
});

describe('rateLimitHeaders: bad input', () => {
  it.each<[string, unknown, unknown, Error]>([
    ['an unknown format', allowed, { format: 'draft-8' }, rangeError("ratekeeper: `format` must be 'draft-10', 'draft-7', 'draft-6' or 'x-ratelimit', got \"draft-8\"")],
    ['a format of the wrong type', allowed, { format: 10 }, typeError("ratekeeper: `format` must be 'draft-10', 'draft-7', 'draft-6' or 'x-ratelimit', got 10")],
    ['an empty name', allowed, { name: '' }, rangeError('ratekeeper: `name` must be non-empty printable ASCII (a structured-field string), got ""')],
    ['a name outside ASCII', allowed, { name: 'café' }, rangeError('ratekeeper: `name` must be non-empty printable ASCII (a structured-field string), got "café"')],
    ['a name with a line break', allowed, { name: 'a\nb' }, rangeError('ratekeeper: `name` must be non-empty printable ASCII (a structured-field string), got "a\\nb"')],
    ['a name that is no string', allowed, { name: 7 }, typeError('ratekeeper: `name` must be a string, got 7')],
    ['a zero window', allowed, { windowMs: 0 }, rangeError('ratekeeper: `windowMs` must be a positive finite number, got 0')],
    ['options that are no object', allowed, 'draft-7', typeError('ratekeeper: rateLimitHeaders options must be an object, got "draft-7"')],
    ['a missing decision', undefined, {}, typeError('ratekeeper: `decision` must be an object, got undefined')],
    ['a decision without allowed', { limit: 1 }, {}, typeError('ratekeeper: `decision.allowed` must be a boolean, got undefined')],
    ['a NaN limit', { ...allowed, limit: Number.NaN }, {}, rangeError('ratekeeper: `decision.limit` must be a finite number of at least 0, got NaN')],
    ['an infinite wait', { ...refused, retryAfterMs: Infinity }, {}, rangeError('ratekeeper: `decision.retryAfterMs` must be a finite number of at least 0, got Infinity')],
    ['a string remaining', { ...allowed, remaining: '3' }, {}, typeError('ratekeeper: `decision.remaining` must be a number, got "3"')],
  ])('refuses %s', (_, decision, options, error) => {
    expect(() => rateLimitHeaders(decision as Decision, options as never)).toThrow(error);
  });
});
