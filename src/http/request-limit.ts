import type { Decision } from '../core/decision';
import { coded, typeError } from '../core/errors';
import { describe, integerIn } from '../core/validate';
import type { AsyncRateLimiter, RateLimiter } from '../limiter/keyed-rate-limiter';
import type { AsyncReservation, Reservation } from '../limiter/reservation';
import { assertObject, oneOf, optionalFunction, positiveNumber } from './check';
import { FORWARDED_HEADERS, forwardedClient, type ForwardedHeader } from './forwarded';
import { addressKey } from './ip-address';
import { HEADER_FORMATS, headerWriter, retryAfterOnly, type HeaderFormat } from './rate-limit-headers';
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
  /** Decides each request: a `KeyedRateLimiter` (synchronous) or a store-backed limiter (a Promise). */
  limiter: RateLimiter | AsyncRateLimiter;
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
  readonly decision: Decision;
  readonly headers: Record<string, string>;
  /**
   * Settles an allowed request's reservation with its response status, once the server has chosen
   * it; undefined when there is nothing to settle. Never rejects: failures go to `onSettleError`.
   */
  readonly finish: ((status: number) => Promise<void>) | undefined;
}

/** The checked options plus the per-request decision. */
export interface RequestLimit<Args extends unknown[]> {
  /** The policy name, for the refusal body. */
  readonly name: string;
  /**
   * Decides a request, reading the peer only for the default key; undefined for a request not counted
   * (an uncounted preflight, or `skip` said so). Rejects when a callback or the limiter fails.
   */
  check(connection: Connection, ...args: Args): Promise<Verdict | undefined>;
}

/** Checks the shared options once, eagerly, and returns the per-request decision they describe. */
export function requestLimit<Args extends unknown[]>(options: RateLimitOptions<Args>, adapter: string): RequestLimit<Args> {
  assertObject(`${adapter} options`, options);
  const { limiter, key, cost, skip, headers = 'draft-10', name = 'default', windowMs } = options;
  const { trustProxies = 0, forwardedHeader = 'x-forwarded-for', countPreflight = false } = options;
  const { skipFailedRequests = false, skipSuccessfulRequests = false, settle, onSettleError } = options;
  if (limiter === null || typeof limiter !== 'object' || typeof limiter.tryAcquire !== 'function') {
    throw typeError(`ratekeeper: \`limiter\` must be an object with a tryAcquire(key, permits) method, got ${describe(limiter)}`);
  }
  optionalFunction('key', key);
  optionalFunction('cost', cost);
  optionalFunction('skip', skip);
  oneOf('headers', headers, [...HEADER_FORMATS, false]);
  policyName('name', name);
  if (windowMs !== undefined) positiveNumber('windowMs', windowMs);
  integerIn('trustProxies', trustProxies, 0, 16);
  oneOf('forwardedHeader', forwardedHeader, FORWARDED_HEADERS);
  oneOf('countPreflight', countPreflight, [true, false]);
  oneOf('skipFailedRequests', skipFailedRequests, [false, true]);
  oneOf('skipSuccessfulRequests', skipSuccessfulRequests, [false, true]);
  optionalFunction('settle', settle);
  optionalFunction('onSettleError', onSettleError);
  const settling = skipFailedRequests || skipSuccessfulRequests || settle !== undefined;
  if (settling && typeof (limiter as Partial<ReservingRateLimiter>).reserve !== 'function') {
    throw typeError(
      'ratekeeper: `skipFailedRequests`, `skipSuccessfulRequests` and `settle` need a limiter with a reserve(key, permits) method, such as a KeyedRateLimiter',
    );
  }

  /** Gives back, settles, or leaves the reservation as it is, by the status the server chose. */
  const settleBy = async (reservation: Reservation | AsyncReservation, status: number, args: Args): Promise<void> => {
    try {
      if ((skipFailedRequests && status >= 400) || (skipSuccessfulRequests && status < 400)) await reservation.cancel();
      else if (settle !== undefined) await reservation.settle(integerIn('settle', await settle(status, ...args), 0, Number.MAX_SAFE_INTEGER));
    } catch (error) {
      try {
        onSettleError?.(error, ...args);
      } catch {
        // Settling runs after the response, where nothing awaits it: a hook that throws would be an
        // unhandled rejection (which ends a Node process by default), and there is no one left to tell.
      }
    }
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
  const fields = headers === false ? retryAfterOnly : headerWriter({ format: headers, name, windowMs });

  return {
    name,
    async check(connection, ...args) {
      if (!countPreflight && isPreflight(connection)) return undefined;
      if (skip !== undefined && (await skip(...args))) return undefined;
      // Awaited only when it is a promise: each await of a plain value costs the request a turn of
      // the microtask queue, and the usual key, cost and limiter answer at once.
      let id = key === undefined ? clientKey(connection) : key(...args);
      if (typeof id !== 'string') id = await id;
      if (typeof id !== 'string') throw typeError(`ratekeeper: \`key\` must return a string, got ${describe(id)}`);
      let permits = cost === undefined ? 1 : cost(...args);
      if (typeof permits !== 'number') permits = await permits;
      if (cost !== undefined) integerIn('cost', permits, 1, Number.MAX_SAFE_INTEGER);
      if (!settling) {
        const answer = limiter.tryAcquire(id, permits);
        const decision = isThenable(answer) ? await answer : answer;
        return { decision, headers: fields(decision), finish: undefined };
      }
      const reservation = await (limiter as Partial<ReservingRateLimiter> as ReservingRateLimiter).reserve(id, permits);
      const { decision } = reservation;
      const finish = decision.allowed ? (status: number) => settleBy(reservation, status, args) : undefined;
      return { decision, headers: fields(decision), finish };
    },
  };
}

/**
 * A decision has no `then`; a store's answer on its way (any thenable, not only a native promise)
 * has. A custom limiter's answer that is neither (undefined, say) is left for the header check to name.
 */
function isThenable(value: Decision | PromiseLike<Decision>): value is PromiseLike<Decision> {
  return typeof (value as Partial<PromiseLike<Decision>> | null | undefined)?.then === 'function';
}
