import type { Decision } from '../core/decision';
import { coded, rangeError, typeError } from '../core/errors';
import { describe, integerIn, isThenable } from '../core/validate';
import { admit, type Admission, type AdmittingRateLimiter } from '../limiter/admit';
import type { AsyncRateLimiter, RateLimiter } from '../limiter/keyed-rate-limiter';
import type { AsyncReservation, Reservation } from '../limiter/reservation';
import { assertObject, oneOf, optionalFunction, positiveNumber } from './check';
import { FORWARDED_HEADERS, forwardedClient, type ForwardedHeader } from './forwarded';
import { addressKey } from './ip-address';
import { QUOTA_UNITS, type PolicyDecision, type QuotaUnit } from './policy';
import { HEADER_FORMATS, headerWriter, policyWriter, retryAfterOnly, type HeaderFormat } from './rate-limit-headers';
import { policyName } from './structured-field';

/**
 * Options every adapter shares. `Args` are the arguments the framework gives the middleware, which
 * the callbacks receive too.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { RateLimitOptions } from 'ratekeeper/http';
 * const rule = Rule.perMinute(100);
 * const shared: RateLimitOptions<[Request]> = {
 *   limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) }),
 *   name: 'api',
 *   windowMs: rule.windowMs,
 *   skip: (request) => new URL(request.url).pathname === '/health',
 * };
 * ```
 */
export interface RateLimitOptions<Args extends unknown[]> {
  /**
   * Decides each request: a `KeyedRateLimiter` (synchronous) or a store-backed limiter (a Promise);
   * or several limits for one route, admitted together all or nothing (see {@link RateLimitPart}):
   * a request one of them refuses spends nothing in any. Each needs `reserve` and `peek` then.
   */
  limiter: RateLimiter | AsyncRateLimiter | readonly RateLimitPart<Args>[];
  /**
   * The key a request is limited under (a user id, an API key). May return a Promise.
   * @default the client address, IPv6 masked to /64 (see `trustProxies` and `addressKey`)
   */
  key?: ((...args: Args) => string | Promise<string>) | undefined;
  /** How many permits a request spends: a positive integer no larger than the limit. May return a Promise. @default 1 */
  cost?: ((...args: Args) => number | Promise<number>) | undefined;
  /** Returns true for a request that is neither counted nor given headers. May return a Promise. @default never skips */
  skip?: ((...args: Args) => boolean | Promise<boolean>) | undefined;
  /** The format of the fields on every response, or `false` for none (a refusal still gets `Retry-After`). @default 'draft-10' */
  headers?: HeaderFormat | false | undefined;
  /** The policy name in the fields and in the refusal body. @default 'default' */
  name?: string | undefined;
  /** The policy window in ms, advertised as `w`; give the limiter's rule window. @default undefined (no `w`) */
  windowMs?: number | undefined;
  /**
   * What the limit counts: `'concurrent-requests'` for an in-flight limit (a `Concurrency`, alone in
   * its limiter), advertised as `qu="concurrent-requests"`; a refusal's `Retry-After` is then at most
   * one second (see "In-flight limits" in docs/http.md). @default 'requests'
   */
  quotaUnit?: QuotaUnit | undefined;
  /**
   * How many reverse proxies in front of the server to trust (0 to 16). With n > 0 the client is the
   * n-th address from the right of the forwarding header (counting the peer as the nearest proxy);
   * with 0, forwarding headers are ignored, since any client can send them. The header is read from
   * the right and never past a malformed entry: see "Who is the client?" in docs/http.md. @default 0
   */
  trustProxies?: number | undefined;
  /** The header the trusted proxies write. @default 'x-forwarded-for' */
  forwardedHeader?: ForwardedHeader | undefined;
  /**
   * Counts CORS preflights (`OPTIONS` with an `Access-Control-Request-Method` header) like any other
   * request. By default a preflight is neither counted nor given headers, as if `skip` said so: a
   * browser sends one before its real request, and a refused preflight, answered without the CORS
   * headers, shows up in the page as a CORS error instead of a 429. @default false
   */
  countPreflight?: boolean | undefined;
  /**
   * Gives a request's permits back when its response status is 400 or more (count only successes).
   * Needs a limiter with `reserve` (see "Settling after the response" in docs/http.md). @default false
   */
  skipFailedRequests?: boolean | undefined;
  /**
   * Gives a request's permits back when its response status is below 400 (count only failures,
   * as a login endpoint does). Needs a limiter with `reserve`. @default false
   */
  skipSuccessfulRequests?: boolean | undefined;
  /**
   * The request's real cost, known once the handler has answered (tokens an upstream used, say):
   * the request's reservation is settled with it, giving back what was not used and charging what
   * was over. Receives the response status and the middleware's arguments. May return a Promise.
   * Needs a limiter with `reserve`. @default undefined (the cost stays what `cost` said)
   */
  settle?: ((status: number, ...args: Args) => number | Promise<number>) | undefined;
  /**
   * Receives what fails while settling after the response (a `settle` that throws or returns a bad
   * number, a store that fails): the response is already on its way, so nothing else can. An error
   * it throws is ignored: settling never rejects.
   * @default undefined (dropped)
   */
  onSettleError?: ((error: unknown, ...args: Args) => void) | undefined;
}

/**
 * One of several limits on a route (`limiter: [...]`), admitted with the others as one admission:
 * `RateLimit-Policy` lists each, `RateLimit` reports the one that binds. Its `key`, `cost` and
 * `settle` default to the middleware's own, its `name` too (so name all but one).
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { RateLimitPart } from 'ratekeeper/http';
 * const perOrg = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(1000)) });
 * const org: RateLimitPart<[Request]> = {
 *   limiter: perOrg,
 *   name: 'org',
 *   windowMs: 60_000,
 *   key: (request) => request.headers.get('x-org') ?? 'none',
 * };
 * ```
 */
export interface RateLimitPart<Args extends unknown[]> {
  /** This limit's limiter: a `KeyedRateLimiter` or a store limiter, with `reserve` and `peek`. */
  limiter: RateLimiter | AsyncRateLimiter;
  /** This policy's name in the fields, unique among the route's. @default the middleware's `name` */
  name?: string | undefined;
  /** This policy's window in ms, advertised as `w`. @default undefined (no `w`) */
  windowMs?: number | undefined;
  /** What this limit counts, as the middleware's `quotaUnit`. @default 'requests' */
  quotaUnit?: QuotaUnit | undefined;
  /** The key the request counts under for this limit. @default the middleware's `key` */
  key?: ((...args: Args) => string | Promise<string>) | undefined;
  /** What the request costs under this limit. @default the middleware's `cost` */
  cost?: ((...args: Args) => number | Promise<number>) | undefined;
  /** This limit's real cost once the response is done. @default the middleware's `settle` */
  settle?: ((status: number, ...args: Args) => number | Promise<number>) | undefined;
}

/**
 * The decision a middleware hands the handler: the binding part's (the refusing one, or the one
 * with fewest left), with every policy's own decision in `parts`, those of the middlewares before
 * it on the same request first. `parts` is not enumerable: `JSON.stringify` writes the decision alone.
 */
export type RequestDecision = Decision & { readonly parts: readonly PolicyDecision[] };

/** A limiter whose requests can be settled after the response: a `KeyedRateLimiter`, or your own. */
export interface ReservingRateLimiter {
  reserve(key: string, permits?: number): Reservation | Promise<AsyncReservation>;
}

/** What an adapter can tell about a request: method, headers, and the peer address (read only for the default key). */
export interface Connection {
  readonly method: string | undefined;
  header(name: string): string | undefined;
  peer(): string | undefined;
}

/** A connection over Node-style headers: lowercase names, a repeated header as an array or joined. */
export function incomingConnection(
  method: string | undefined,
  peer: () => string | undefined,
  headers: Record<string, string | string[] | undefined>,
): Connection {
  return new IncomingConnection(method, peer, headers);
}

// A class rather than an object literal: one is made per request, and its method is shared.
class IncomingConnection implements Connection {
  readonly method: string | undefined;
  readonly peer: () => string | undefined;
  readonly #headers: Record<string, string | string[] | undefined>;

  constructor(method: string | undefined, peer: () => string | undefined, headers: Record<string, string | string[] | undefined>) {
    this.method = method;
    this.peer = peer;
    this.#headers = headers;
  }

  header(name: string): string | undefined {
    const value = this.#headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  }
}

/** A CORS preflight: `OPTIONS` with `Access-Control-Request-Method`, which a browser always sends in one (Fetch standard). */
function isPreflight(connection: Connection): boolean {
  return connection.method === 'OPTIONS' && connection.header('access-control-request-method') !== undefined;
}

/** The outcome for a request that was counted. */
export interface Verdict {
  /** The key the request was counted under. */
  readonly key: string;
  readonly decision: RequestDecision;
  /** The name of the binding policy: the refusing one, for the refusal body. */
  readonly policy: string;
  readonly headers: Record<string, string>;
  /**
   * Settles an allowed request's reservation with its response status, once the server has chosen
   * it, or undefined when the client left before any status: then every part keeps what it reserved
   * (nothing is given back, `settle` is not called) and lets go of its in-flight permits. Undefined
   * when there is nothing to settle. Never rejects: failures go to `onSettleError`.
   */
  readonly finish: ((status: number | undefined) => Promise<void>) | undefined;
  /**
   * Whether the options ask for `finish` (settling by the status); otherwise it only lets go of what
   * a reservation in memory holds, and a response that cannot tell when it is done may skip it.
   */
  readonly settles: boolean;
}

/** The checked options plus the per-request decision. */
export interface RequestLimit<Args extends unknown[]> {
  /**
   * Decides a request, reading the peer only for the default key; undefined for a request not counted
   * (an uncounted preflight, or `skip` said so). `holder` is the object the request's earlier
   * middlewares left their reservations on (Node's request, a Fetch `Request`), or undefined where
   * middlewares cannot stack. Rejects when a callback or the limiter fails.
   */
  check(connection: Connection, holder: object | undefined, ...args: Args): Promise<Verdict | undefined>;
}

/** One limit, its options checked. `inMemory` is learnt from its first reservation: true, false, or not yet known. */
interface Part<Args extends unknown[]> {
  readonly limiter: RateLimiter | AsyncRateLimiter;
  readonly name: string;
  readonly windowMs: number | undefined;
  readonly quotaUnit: QuotaUnit | undefined;
  readonly key: ((...args: Args) => string | Promise<string>) | undefined;
  readonly cost: ((...args: Args) => number | Promise<number>) | undefined;
  readonly settle: ((status: number, ...args: Args) => number | Promise<number>) | undefined;
  inMemory: boolean | undefined;
}

/**
 * What a middleware leaves on a request it let through: its policies, and how to give back what they
 * hold if a later middleware refuses the request. `done` once given back or settled.
 */
interface Held {
  readonly policies: readonly PolicyDecision[];
  readonly cancel: (() => void | Promise<void>) | undefined;
  done: boolean;
}

// Per request (Node's request, a Fetch Request), what the middlewares before have let through.
const heldBy = new WeakMap<object, Held[]>();

/** Checks the shared options once, eagerly, and returns the per-request decision they describe. */
export function requestLimit<Args extends unknown[]>(options: RateLimitOptions<Args>, adapter: string): RequestLimit<Args> {
  assertObject(`${adapter} options`, options);
  const { limiter, key, cost, skip, headers = 'draft-10', name = 'default', windowMs, quotaUnit } = options;
  const { trustProxies = 0, forwardedHeader = 'x-forwarded-for', countPreflight = false } = options;
  const { skipFailedRequests = false, skipSuccessfulRequests = false, settle, onSettleError } = options;
  optionalFunction('key', key);
  optionalFunction('cost', cost);
  optionalFunction('skip', skip);
  oneOf('headers', headers, [...HEADER_FORMATS, false]);
  policyName('name', name);
  if (windowMs !== undefined) positiveNumber('windowMs', windowMs);
  if (quotaUnit !== undefined) oneOf('quotaUnit', quotaUnit, QUOTA_UNITS);
  integerIn('trustProxies', trustProxies, 0, 16);
  oneOf('forwardedHeader', forwardedHeader, FORWARDED_HEADERS);
  oneOf('countPreflight', countPreflight, [true, false]);
  oneOf('skipFailedRequests', skipFailedRequests, [false, true]);
  oneOf('skipSuccessfulRequests', skipSuccessfulRequests, [false, true]);
  optionalFunction('settle', settle);
  optionalFunction('onSettleError', onSettleError);
  const skipping = skipFailedRequests || skipSuccessfulRequests;
  const parts = partsOf(limiter, { name, windowMs, quotaUnit, settle }, headers !== false);
  const several = parts.length > 1;
  const settling = skipping || parts.some((part) => part.settle !== undefined);
  for (const [i, part] of parts.entries()) {
    const reserving = part.limiter as Partial<ReservingRateLimiter & { peek: unknown }>;
    if (several && (typeof reserving.reserve !== 'function' || typeof reserving.peek !== 'function')) {
      throw typeError(`ratekeeper: \`limiter[${i}].limiter\` must have reserve(key, permits) and peek(key, permits) methods to be admitted with other limits, as a KeyedRateLimiter has`);
    }
    if (settling && typeof reserving.reserve !== 'function') {
      throw typeError(
        'ratekeeper: `skipFailedRequests`, `skipSuccessfulRequests` and `settle` need a limiter with a reserve(key, permits) method, such as a KeyedRateLimiter',
      );
    }
  }
  const [first] = parts as [Part<Args>, ...Part<Args>[]];

  const report = (error: unknown, args: Args): void => {
    try {
      onSettleError?.(error, ...args);
    } catch {
      // Settling runs after the response, where nothing awaits it: a hook that throws would be an
      // unhandled rejection (which ends a Node process by default), and there is no one left to tell.
    }
  };

  /** The real cost of each part by the status the server chose: its `settle`'s, else what it reserved. */
  const actualCosts = async (permits: readonly number[], status: number, args: Args): Promise<number[]> => {
    const costs: number[] = [];
    for (const [i, part] of parts.entries()) {
      costs.push(part.settle === undefined ? permits[i]! : integerIn('settle', await part.settle(status, ...args), 0, Number.MAX_SAFE_INTEGER));
    }
    return costs;
  };

  const clientKey = (connection: Connection): string => {
    const client = forwardedClient(connection.peer(), connection.header(forwardedHeader), forwardedHeader, trustProxies);
    if (client === undefined) {
      throw coded(
        new Error(
          'ratekeeper: cannot tell which client sent this request, as the server gave no peer address; ' +
            'pass `key` or `clientAddress`, or set `trustProxies` behind a proxy',
        ),
        'ERR_RATEKEEPER_NO_CLIENT_ADDRESS',
      );
    }
    return addressKey(client);
  };
  const fields = headers === false ? retryAfterOnly : headerWriter({ format: headers, name: first.name, windowMs: first.windowMs, quotaUnit: first.quotaUnit });
  const listFields = headers === false ? (list: readonly PolicyDecision[], binding: number) => retryAfterOnly(list[binding]!.decision) : policyWriter(headers);
  // A store limiter with an in-flight limit (its `concurrency` option) must reserve, and release at
  // the response's end: its tryAcquire rejects, and a permit never released is held until its lease ends.
  const leasing = parts.some((part) => (part.limiter as { concurrency?: unknown }).concurrency !== undefined);

  /** A part's key: its own, else the middleware's, else the client's address. */
  const keyOf = (part: Part<Args>, connection: Connection, args: Args): string | Promise<string> =>
    part.key !== undefined ? part.key(...args) : key !== undefined ? key(...args) : clientKey(connection);

  return {
    async check(connection, holder, ...args) {
      if (!countPreflight && isPreflight(connection)) return undefined;
      if (skip !== undefined && (await skip(...args))) return undefined;
      // Awaited only when it is a promise: each await of a plain value costs the request a turn of
      // the microtask queue, and the usual key, cost and limiter answer at once.
      const ids: string[] = [];
      const permits: number[] = [];
      let shared: string | undefined;
      for (const part of parts) {
        let id = part.key === undefined && shared !== undefined ? shared : keyOf(part, connection, args);
        if (typeof id !== 'string') id = await id;
        if (typeof id !== 'string') throw typeError(`ratekeeper: \`key\` must return a string, got ${describe(id)}`);
        if (part.key === undefined) shared = id;
        ids.push(id);
        const costOf = part.cost ?? cost;
        let amount = costOf === undefined ? 1 : costOf(...args);
        if (typeof amount !== 'number') amount = await amount;
        if (costOf !== undefined) integerIn('cost', amount, 1, Number.MAX_SAFE_INTEGER);
        permits.push(amount);
      }
      const earlier = holder === undefined ? undefined : heldBy.get(holder)?.filter((held) => !held.done);

      // One limit, alone on the request, that nothing will settle and whose store cannot give back
      // cheaply: decided with tryAcquire, batched and answered from a store's refusal cache.
      if (!several && !settling && !leasing && earlier === undefined && (first.inMemory === false || typeof (first.limiter as Partial<ReservingRateLimiter>).reserve !== 'function')) {
        const answer = first.limiter.tryAcquire(ids[0]!, permits[0]);
        const decision = isThenable(answer) ? await answer : answer;
        // The fields first: they check a custom limiter's answer.
        const written = fields(decision);
        const policies = [{ decision, name: first.name, windowMs: first.windowMs, quotaUnit: first.quotaUnit }];
        // Listed for the middlewares after it, with nothing to give back.
        if (holder !== undefined && decision.allowed) heldBy.set(holder, [{ policies, cancel: undefined, done: false }]);
        return { key: ids[0]!, decision: withParts(decision, policies), policy: first.name, headers: written, finish: undefined, settles: false };
      }

      const admission = await admitted(parts, ids, permits);
      const own = admission.parts.map((decision, i) => ({ decision, name: parts[i]!.name, windowMs: parts[i]!.windowMs, quotaUnit: parts[i]!.quotaUnit }));
      const before = earlier ?? [];
      const policies = [...before.flatMap((held) => held.policies), ...uniqueAfter(before, own)];
      const refused = !admission.decision.allowed;
      if (refused) {
        // One admission over every middleware of the request: a later refusal gives back the earlier grants.
        for (const held of before) {
          held.done = true;
          try {
            await held.cancel?.();
          } catch (error) {
            report(error, args);
          }
        }
      }
      // The fields tell an in-flight refusal's wait as at most a second (the binding refusal is
      // chosen among those waits); the decision in the handler keeps its own upper bound.
      const told = policies.map(toldWait);
      const chosen = refused ? longestWait(told) : fewestLeft(told);
      const written = told.length === 1 ? fields(told[0]!.decision) : listFields(told, chosen);
      const decision = withParts(policies[chosen]!.decision, policies);
      let finish: Verdict['finish'];
      const holds = admission.holds;
      if (!refused && holds !== undefined) {
        const mine: Held = { policies: own, cancel: () => holds.cancel(), done: false };
        if (holder !== undefined) heldBy.set(holder, [...before, mine]);
        // Settled when something needs it; a reservation in memory is settled in any case, so that its
        // receipt goes (a store's keeps nothing: its settle would only cost a round trip).
        if (settling || admission.inMemory || leasing) {
          finish = async (status) => {
            if (mine.done) return;
            mine.done = true;
            try {
              if (status === undefined) await holds.settle([...permits]);
              else if ((skipFailedRequests && status >= 400) || (skipSuccessfulRequests && status < 400)) await holds.cancel();
              else await holds.settle(await actualCosts(permits, status, args));
            } catch (error) {
              report(error, args);
            }
          };
        }
      }
      return { key: ids[0]!, decision, policy: policies[chosen]!.name, headers: written, finish, settles: settling };
    },
  };
}

/** What the limits of one middleware decided, and what they hold when granted. */
interface Admitted {
  readonly decision: Decision;
  readonly parts: readonly Decision[];
  readonly holds: { settle(actual: number[]): unknown; cancel(): void | Promise<void> } | undefined;
  /** Every part was reserved in memory. */
  readonly inMemory: boolean;
}

/** Reserves every limit as one admission (one limit alone: its reservation); learns which limiters answer at once. */
async function admitted<Args extends unknown[]>(parts: readonly Part<Args>[], ids: readonly string[], permits: readonly number[]): Promise<Admitted> {
  if (parts.length === 1) {
    const part = parts[0]!;
    const answer = (part.limiter as Partial<ReservingRateLimiter> as ReservingRateLimiter).reserve(ids[0]!, permits[0]);
    part.inMemory = !isThenable(answer);
    const reservation = isThenable(answer) ? await answer : answer;
    const { decision } = reservation;
    const holds = decision.allowed ? { settle: ([actual]: number[]) => reservation.settle(actual!), cancel: () => reservation.cancel() } : undefined;
    return { decision, parts: [decision], holds, inMemory: part.inMemory };
  }
  const limiters = parts.map((part) => part.limiter as unknown as AdmittingRateLimiter);
  const answer = admit(limiters.map((limiter, i) => ({ limiter, key: ids[i]!, permits: permits[i] })));
  const inMemory = !isThenable(answer);
  for (const part of parts) part.inMemory ??= inMemory;
  const admission: Admission = isThenable(answer) ? await answer : answer;
  return { decision: admission.decision, parts: admission.parts, holds: admission.decision.allowed ? admission : undefined, inMemory };
}

/** The limits a middleware was given: `limiter` alone, or each of a list, with their options checked. */
function partsOf<Args extends unknown[]>(
  limiter: RateLimitOptions<Args>['limiter'],
  defaults: { name: string; windowMs: number | undefined; quotaUnit: QuotaUnit | undefined; settle: RateLimitPart<Args>['settle'] },
  named: boolean,
): Part<Args>[] {
  if (!Array.isArray(limiter)) {
    const single = limiter as RateLimiter | AsyncRateLimiter | null;
    if (single === null || typeof single !== 'object' || typeof single.tryAcquire !== 'function') {
      throw typeError(`ratekeeper: \`limiter\` must be an object with a tryAcquire(key, permits) method, got ${describe(single)}`);
    }
    return [{ limiter: single, ...defaults, key: undefined, cost: undefined, inMemory: undefined }];
  }
  const list = limiter as readonly RateLimitPart<Args>[];
  if (list.length === 0) throw rangeError('ratekeeper: `limiter` must hold at least one limit, got an empty array');
  const names = new Set<string>();
  return list.map((entry, i) => {
    assertObject(`\`limiter[${i}]\``, entry);
    const { limiter: own, name = defaults.name, windowMs = undefined, quotaUnit = undefined, key, cost, settle = defaults.settle } = entry;
    if (own === null || typeof own !== 'object' || typeof own.tryAcquire !== 'function') {
      throw typeError(`ratekeeper: \`limiter[${i}].limiter\` must be an object with a tryAcquire(key, permits) method, got ${describe(own)}`);
    }
    policyName(`limiter[${i}].name`, name);
    if (named && names.has(name)) throw rangeError(`ratekeeper: \`limiter[${i}].name\` repeats ${describe(name)}; each limit of a route needs its own name`);
    names.add(name);
    if (windowMs !== undefined) positiveNumber(`limiter[${i}].windowMs`, windowMs);
    if (quotaUnit !== undefined) oneOf(`limiter[${i}].quotaUnit`, quotaUnit, QUOTA_UNITS);
    optionalFunction(`limiter[${i}].key`, key);
    optionalFunction(`limiter[${i}].cost`, cost);
    optionalFunction(`limiter[${i}].settle`, settle);
    return { limiter: own, name, windowMs, quotaUnit, key, cost, settle, inMemory: undefined };
  });
}

/**
 * This middleware's policies, named apart from the earlier middlewares' on the request: a name
 * already listed gets `-2` (or `-3`, ...) appended, so that `RateLimit` can point at one policy.
 */
function uniqueAfter(before: readonly Held[], own: PolicyDecision[]): PolicyDecision[] {
  if (before.length === 0) return own;
  const taken = new Set(before.flatMap((held) => held.policies.map((policy) => policy.name)));
  return own.map((policy) => {
    let name = policy.name;
    for (let n = 2; taken.has(name); n++) name = `${policy.name}-${n}`;
    taken.add(name);
    return name === policy.name ? policy : { ...policy, name };
  });
}

/**
 * A policy as the fields tell it. An in-flight refusal's `retryAfterMs` is when enough held leases
 * end, an upper bound: a release usually comes long before (a response ends), so a client is told
 * to retry in at most one second, the least `Retry-After` can say; a retry too early costs one more
 * refusal, one too late leaves the capacity idle.
 */
function toldWait(policy: PolicyDecision): PolicyDecision {
  const { decision } = policy;
  if (policy.quotaUnit !== 'concurrent-requests' || decision.allowed || decision.retryAfterMs <= 1000) return policy;
  return { ...policy, decision: { ...decision, retryAfterMs: 1000 } };
}

/** The refusing policy that waits longest, the first on a tie: the one a refused request binds on. */
function longestWait(policies: readonly PolicyDecision[]): number {
  let chosen = -1;
  for (let i = 0; i < policies.length; i++) {
    const { decision } = policies[i]!;
    if (!decision.allowed && (chosen === -1 || decision.retryAfterMs > policies[chosen]!.decision.retryAfterMs)) chosen = i;
  }
  return chosen;
}

/** The policy with the fewest left, the first on a tie: the one a granted request binds on. */
function fewestLeft(policies: readonly PolicyDecision[]): number {
  let chosen = 0;
  for (let i = 1; i < policies.length; i++) if (policies[i]!.decision.remaining < policies[chosen]!.decision.remaining) chosen = i;
  return chosen;
}

/** The binding decision, with every policy's own as its (not enumerable) `parts`. */
function withParts(decision: Decision, parts: readonly PolicyDecision[]): RequestDecision {
  return Object.defineProperty({ ...decision }, 'parts', { value: parts }) as RequestDecision;
}
