import type { Decision } from '../core/decision';
import { rangeError } from '../core/errors';
import { assertObject, oneOf } from './check';
import { policiesOf, policyOf, QUOTA_UNITS, tighter, withUnit, type Policy, type PolicyDecision, type QuotaUnit } from './policy';
import { policyName, sfString } from './structured-field';

/** The header formats `rateLimitHeaders` can write, newest first. */
export const HEADER_FORMATS = ['draft-10', 'draft-7', 'draft-6', 'x-ratelimit'] as const;

/**
 * A generation of the rate-limit response fields:
 * - `'draft-10'`: `RateLimit-Policy: "name";q=100;w=60` and `RateLimit: "name";r=99;t=60`
 *   (draft-ietf-httpapi-ratelimit-headers-08 to -10).
 * - `'draft-7'`: `RateLimit-Policy: 100;w=60` and `RateLimit: limit=100, remaining=99, reset=60`.
 * - `'draft-6'`: `RateLimit-Policy: 100;w=60`, `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
 * - `'x-ratelimit'`: the de facto `X-RateLimit-Limit`, `-Remaining` and `-Reset` (delay seconds, not a date).
 *
 * @example
 * ```ts
 * import type { HeaderFormat } from 'ratekeeper/http';
 * const format: HeaderFormat = process.env.RATE_LIMIT_HEADERS === 'legacy' ? 'x-ratelimit' : 'draft-10';
 * ```
 */
export type HeaderFormat = (typeof HEADER_FORMATS)[number];

/**
 * Options of {@link rateLimitHeaders} for a single decision.
 *
 * @example
 * ```ts
 * import { Rule } from 'ratekeeper';
 * import type { RateLimitHeaderOptions } from 'ratekeeper/http';
 * const rule = Rule.perHour(1000);
 * const options: RateLimitHeaderOptions = { format: 'draft-7', name: 'hourly', windowMs: rule.windowMs };
 * ```
 */
export interface RateLimitHeaderOptions {
  /** Which generation of the fields to write. @default 'draft-10' */
  format?: HeaderFormat | undefined;
  /** The policy's name: non-empty printable ASCII, written as a structured-field string. @default 'default' */
  name?: string | undefined;
  /**
   * The policy's window in ms, advertised as `w` in whole seconds rounded up (at least 1). Without
   * it, `'draft-10'` leaves `w` out and `'draft-7'`/`'draft-6'` leave out `RateLimit-Policy`, where `w`
   * is required. @default undefined
   */
  windowMs?: number | undefined;
  /**
   * What the quota counts: `'concurrent-requests'` for an in-flight limit (a `Concurrency`),
   * advertised as `qu="concurrent-requests"` in `'draft-10'`'s `RateLimit-Policy`. @default 'requests'
   */
  quotaUnit?: QuotaUnit | undefined;
}

/** `strict`: a list the format cannot carry throws, rather than leaving `RateLimit-Policy` out. */
type Writer = (policies: readonly Policy[], tightest: Policy, strict: boolean) => Record<string, string>;

const WRITERS: Record<HeaderFormat, Writer> = {
  'draft-10': (policies, tightest) => ({
    'RateLimit-Policy': policies
      .map((p) => `${sfString(p.name)};q=${p.quota}${p.window === undefined ? '' : `;w=${p.window}`}${p.concurrent === true ? ';qu="concurrent-requests"' : ''}`)
      .join(', '),
    RateLimit: `${sfString(tightest.name)};r=${tightest.remaining};t=${tightest.seconds}`,
  }),
  'draft-7': (policies, tightest, strict) => ({
    ...numberedPolicies(policies, 'draft-7', strict),
    RateLimit: `limit=${tightest.quota}, remaining=${tightest.remaining}, reset=${tightest.seconds}`,
  }),
  'draft-6': (policies, tightest, strict) => ({
    ...numberedPolicies(policies, 'draft-6', strict),
    'RateLimit-Limit': String(tightest.quota),
    'RateLimit-Remaining': String(tightest.remaining),
    'RateLimit-Reset': String(tightest.seconds),
  }),
  'x-ratelimit': (_, tightest) => ({
    'X-RateLimit-Limit': String(tightest.quota),
    'X-RateLimit-Remaining': String(tightest.remaining),
    'X-RateLimit-Reset': String(tightest.seconds),
  }),
};

/**
 * Formats decisions as rate-limit response fields, plus `Retry-After` (whole seconds, rounded up)
 * when refused. Every value is an integer; names are escaped structured-field strings.
 *
 * `t` (and `reset` in the older formats) is the whole seconds, rounded up, until the reported
 * policy has more quota: for a refusal, `retryAfterMs`, so `Retry-After` equals it; for an allowed
 * request, `resetAfterMs`, the time until the quota is whole again (an upper bound on the next
 * permit, since a decision does not say when that one comes).
 *
 * With several policies (a composite limit), `RateLimit-Policy` lists them all and the other fields
 * report the tightest: a refusing policy first, then the fewest remaining, then the longest `t`.
 * `Retry-After` is the longest wait among the refusing policies.
 *
 * @throws TypeError or RangeError naming the bad decision field or option.
 * @example
 * ```ts
 * import { KeyedRateLimiter, FixedWindow, Rule } from 'ratekeeper';
 * import { rateLimitHeaders } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new FixedWindow(Rule.perMinute(100)) });
 * rateLimitHeaders(limiter.tryAcquire('203.0.113.7'), { name: 'api', windowMs: 60_000 });
 * // { 'RateLimit-Policy': '"api";q=100;w=60', RateLimit: '"api";r=99;t=…' }
 * rateLimitHeaders([
 *   { decision: limiter.tryAcquire('a'), name: 'minute', windowMs: 60_000 },
 *   { decision: limiter.tryAcquire('b'), name: 'day', windowMs: 86_400_000 },
 * ]);
 * ```
 */
export function rateLimitHeaders(decision: Decision, options?: RateLimitHeaderOptions): Record<string, string>;
export function rateLimitHeaders(
  policies: readonly PolicyDecision[],
  options?: Pick<RateLimitHeaderOptions, 'format'>,
): Record<string, string>;
export function rateLimitHeaders(
  input: Decision | readonly PolicyDecision[],
  options: RateLimitHeaderOptions = {},
): Record<string, string> {
  assertObject('rateLimitHeaders options', options);
  const format = oneOf('format', options.format ?? 'draft-10', HEADER_FORMATS);
  const policies = isList(input)
    ? policiesOf(input)
    : [withUnit(policyOf(input, options.name ?? 'default', options.windowMs, ''), options.quotaUnit, 'quotaUnit')];
  const tightest = policies.reduce((a, b) => (tighter(b, a) ? b : a));
  const headers = WRITERS[format](policies, tightest, true);
  const refused = policies.filter((p) => p.refused);
  if (refused.length > 0) headers['Retry-After'] = String(Math.max(...refused.map((p) => p.seconds)));
  return headers;
}

/**
 * {@link rateLimitHeaders} for one decision, with `options` checked once: what middleware calls per
 * request. Writes exactly what `rateLimitHeaders(decision, options)` writes.
 */
export function headerWriter(options: RateLimitHeaderOptions): (decision: Decision) => Record<string, string> {
  assertObject('rateLimitHeaders options', options);
  const write = WRITERS[oneOf('format', options.format ?? 'draft-10', HEADER_FORMATS)];
  const name = policyName('name', options.name ?? 'default');
  const { windowMs } = options;
  const concurrent = oneOf('quotaUnit', options.quotaUnit ?? 'requests', QUOTA_UNITS) === 'concurrent-requests';
  return (decision) => {
    const policy = concurrent ? { ...policyOf(decision, name, windowMs, ''), concurrent } : policyOf(decision, name, windowMs, '');
    const policies = [policy];
    const headers = write(policies, policy, true);
    if (policy.refused) headers['Retry-After'] = String(policy.seconds);
    return headers;
  };
}

/**
 * The fields of a route's several policies, `binding` the one `RateLimit` reports (and whose wait
 * is `Retry-After` when refused), for middleware: the names are unique already. Where draft-6/-7
 * cannot list the policies (two with one quota) `RateLimit-Policy` is left out, not thrown for.
 */
export function policyWriter(format: HeaderFormat): (list: readonly PolicyDecision[], binding: number) => Record<string, string> {
  const write = WRITERS[format];
  return (list, binding) => {
    const policies = list.map((entry, i) => withUnit(policyOf(entry.decision, entry.name, entry.windowMs, `policies[${i}].`), entry.quotaUnit, `policies[${i}].quotaUnit`));
    const chosen = policies[binding]!;
    const headers = write(policies, chosen, false);
    if (chosen.refused) headers['Retry-After'] = String(chosen.seconds);
    return headers;
  };
}

/** `Retry-After` alone, for middleware told to write no RateLimit fields. */
export function retryAfterOnly(decision: Decision): Record<string, string> {
  return decision.allowed ? {} : { 'Retry-After': String(policyOf(decision, 'default', undefined, '').seconds) };
}

function isList(input: Decision | readonly PolicyDecision[]): input is readonly PolicyDecision[] {
  return Array.isArray(input);
}

/**
 * The draft-6/-7 `RateLimit-Policy`: Integer items whose required `w` needs a known window, and which
 * may not repeat a quota value (draft-7 §3.5), so the field is left out or refused rather than malformed.
 */
function numberedPolicies(policies: readonly Policy[], format: HeaderFormat, strict: boolean): Record<string, string> {
  if (policies.some((p) => p.window === undefined)) return {};
  const quotas = new Set(policies.map((p) => p.quota));
  if (quotas.size < policies.length) {
    if (!strict) return {};
    throw rangeError(`ratekeeper: ${format} cannot list two policies with the same limit; use 'draft-10', which names them`);
  }
  return { 'RateLimit-Policy': policies.map((p) => `${p.quota};w=${p.window}`).join(', ') };
}
