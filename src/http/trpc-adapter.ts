import type { Rejected } from '../core/decision';
import { coded } from '../core/errors';
import { RateLimitedError } from '../limiter/pace';
import { assertObject } from './check';
import type { RateLimitState } from './koa-adapter';
import { type Connection, incomingConnection, requestLimit, type RateLimitOptions } from './request-limit';

/** The call options tRPC hands a middleware, as far as this one reads them, so that tRPC is never imported. */
export interface TrpcCallLike {
  /**
   * The procedure's context. Without a `key`, its `req` names the client: Node's request
   * (standalone, Express, Next.js and WebSocket adapters) or a Fetch `Request` (read only through
   * `trustProxies`, as it carries no peer address). Its `res` (Node) or `resHeaders` (Fetch
   * adapter) gets the `Retry-After` of a refusal.
   */
  readonly ctx: unknown;
  /** The procedure's path, such as `post.byId`. */
  readonly path: string;
  readonly type: 'query' | 'mutation' | 'subscription';
  /** Aborts when the client goes away (tRPC 11); a call whose client left before its result is not settled. */
  readonly signal?: AbortSignal | undefined;
}

/** What tRPC's `next()` resolves with, as far as settling reads it. */
export interface TrpcResultLike {
  readonly ok: boolean;
  readonly error?: { readonly code?: unknown } | undefined;
}

/**
 * The middleware {@link trpcRateLimit} returns, for `t.middleware(...)` or `procedure.use(...)`: it
 * passes tRPC's own result through, and adds the decision to the context (`ctx.rateLimit`).
 */
export type TrpcRateLimitMiddleware<Call extends TrpcCallLike> = <R extends TrpcResultLike>(
  call: Call & { next(options?: { ctx: RateLimitState }): Promise<R> },
) => Promise<R>;

/**
 * Options of {@link trpcRateLimit}; the callbacks receive the middleware's options (`ctx`, `path`,
 * `type`, `input`, ...). A refusal writes only `Retry-After`: one response answers every call of a
 * batch, so there is no one policy for RateLimit fields to describe.
 *
 * @example
 * ```ts
 * import { initTRPC } from '@trpc/server';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import { trpcRateLimit } from 'ratekeeper/http';
 * const t = initTRPC.context<{ userId: string }>().create();
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * // One limit per user and procedure; a search costs 5.
 * const limited = t.procedure.use(
 *   trpcRateLimit({ limiter, key: ({ ctx, path }) => `${ctx.userId}:${path}`, cost: ({ path }) => (path === 'search' ? 5 : 1) }),
 * );
 * ```
 */
export interface TrpcRateLimitOptions<Call extends TrpcCallLike = TrpcCallLike>
  extends Omit<RateLimitOptions<[call: Call]>, 'headers' | 'name' | 'windowMs' | 'countPreflight'> {
  /**
   * The key a call is limited under (a user id from the context, say). May return a Promise.
   * @default the client address of `ctx.req` (see `trustProxies`); a call whose context has no
   * `req` fails with `ERR_RATEKEEPER_NO_CLIENT_ADDRESS`
   */
  key?: ((call: Call) => string | Promise<string>) | undefined;
  /**
   * The real cost, once the procedure has answered; receives the HTTP status tRPC gives its result
   * (200, or its error code's: `BAD_REQUEST` 400, `UNAUTHORIZED` 401, ..., 500 for an unknown code).
   * Needs a limiter with `reserve`. @default undefined (the cost stays what `cost` said)
   */
  settle?: ((status: number, call: Call) => number | Promise<number>) | undefined;
}

/**
 * tRPC middleware (tRPC 11): counts each procedure call (each call of a batch counts once, and a
 * subscription once, when it starts) and refuses one over the limit by throwing an error tRPC
 * answers as `TOO_MANY_REQUESTS` (HTTP 429; 207 for a batch whose other calls succeeded). The error
 * is named `TRPCError` with that `code`, which is how tRPC recognises its own errors across copies;
 * its `cause` is a `RateLimitedError` whose `decision` holds `retryAfterMs`. When the context holds
 * the response (`res` or `resHeaders`), `Retry-After` is set on it: in a batch, the longest wait.
 * The decision is `ctx.rateLimit` for the procedure (see {@link RateLimitState}). `skipFailedRequests`,
 * `skipSuccessfulRequests` and `settle` settle when the procedure returns, by the HTTP status of
 * its result (a call whose client left before then counts in full, and `settle` is not called);
 * errors from the limiter or the callbacks fail the call as tRPC's other errors do.
 *
 * @example
 * ```ts
 * import { initTRPC } from '@trpc/server';
 * import type { CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import { trpcRateLimit } from 'ratekeeper/http';
 * // The request and response on the context: the client address is the default key, and a
 * // refusal gets its Retry-After.
 * export const createContext = ({ req, res }: CreateHTTPContextOptions) => ({ req, res });
 * const t = initTRPC.context<typeof createContext>().create();
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * export const limitedProcedure = t.procedure.use(trpcRateLimit({ limiter, trustProxies: 1 }));
 * ```
 */
export function trpcRateLimit<Call extends TrpcCallLike = TrpcCallLike>(options: TrpcRateLimitOptions<Call>): TrpcRateLimitMiddleware<Call> {
  assertObject('trpcRateLimit options', options);
  // Retry-After alone, for a refusal; the options that shape the RateLimit fields or concern
  // preflights are none of a procedure call's, and are ignored as any unknown option is.
  const limit = requestLimit<[Call]>({ ...options, headers: false, name: undefined, windowMs: undefined, countPreflight: undefined }, 'trpcRateLimit');
  const keyed = options.key !== undefined;

  return async <R extends TrpcResultLike>(call: Call & { next(options?: { ctx: RateLimitState }): Promise<R> }) => {
    const verdict = await limit.check(keyed ? UNREAD : connectionOf(call.ctx), undefined, call);
    if (verdict === undefined) return call.next();
    const { key, decision, headers, finish } = verdict;
    if (!decision.allowed) {
      setRetryAfter(call.ctx, Number(headers['Retry-After']));
      throw new TooManyRequestsError(key, decision);
    }
    if (finish === undefined) return call.next({ ctx: { rateLimit: decision } });
    let result: R;
    try {
      result = await call.next({ ctx: { rateLimit: decision } });
    } catch (error) {
      // tRPC resolves with a failed result rather than rejecting; a rejection is a failure all the same.
      void finish(500);
      throw error;
    }
    // As over Node: a client that left before the answer gets nothing back, or leaving would earn
    // refunds (a procedure that stops on the abort fails, and skipFailedRequests would give it back).
    void finish(call.signal?.aborted === true ? undefined : result.ok ? 200 : httpStatusOf(result.error?.code));
    return result;
  };
}

/**
 * The error a refused call throws. tRPC takes an error named `TRPCError` for one of its own (so that
 * two copies of tRPC agree), reading its `code`: no import of tRPC is needed for a 429.
 */
class TooManyRequestsError extends Error {
  override readonly name = 'TRPCError';
  readonly code = 'TOO_MANY_REQUESTS';
  declare readonly cause: RateLimitedError;

  constructor(key: string, decision: Rejected) {
    // The message reaches the client; the key (an address, a user id) stays in the cause, on the server.
    super(`Rate limit exceeded: retry in ${decision.retryAfterMs} ms`, { cause: new RateLimitedError(key, decision) });
  }
}

/** tRPC's own mapping of its error codes to HTTP statuses (JSONRPC2_TO_HTTP_CODE in @trpc/server 11). */
const HTTP_STATUS: Readonly<Record<string, number>> = {
  PARSE_ERROR: 400,
  BAD_REQUEST: 400,
  UNAUTHORIZED: 401,
  PAYMENT_REQUIRED: 402,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_SUPPORTED: 405,
  TIMEOUT: 408,
  CONFLICT: 409,
  PRECONDITION_FAILED: 412,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  UNPROCESSABLE_CONTENT: 422,
  PRECONDITION_REQUIRED: 428,
  TOO_MANY_REQUESTS: 429,
  CLIENT_CLOSED_REQUEST: 499,
  INTERNAL_SERVER_ERROR: 500,
  NOT_IMPLEMENTED: 501,
  BAD_GATEWAY: 502,
  SERVICE_UNAVAILABLE: 503,
  GATEWAY_TIMEOUT: 504,
};

/** The HTTP status tRPC answers a failed call with: its code's, or 500 for a code it does not know. */
function httpStatusOf(code: unknown): number {
  return (typeof code === 'string' && Object.hasOwn(HTTP_STATUS, code) ? HTTP_STATUS[code] : undefined) ?? 500;
}

type Bag = Record<string, unknown>;
const bag = (value: unknown): Bag | undefined => (value !== null && typeof value === 'object' ? (value as Bag) : undefined);

/** A `key` is given: nothing about the connection is read. */
const UNREAD: Connection = { method: undefined, header: () => undefined, peer: () => undefined };

/**
 * The client as the context's `req` tells it: Node's request (peer and headers) or a Fetch
 * `Request` (headers only). The method is left out: a procedure call is never a CORS preflight.
 */
function connectionOf(ctx: unknown): Connection {
  const req = bag(bag(ctx)?.['req']);
  const headers = bag(req?.['headers']);
  if (headers !== undefined && typeof headers['get'] === 'function') {
    const fetchHeaders = headers as unknown as Headers;
    return { method: undefined, header: (name) => fetchHeaders.get(name) ?? undefined, peer: () => undefined };
  }
  const socket = bag(req?.['socket']);
  if (headers !== undefined && socket !== undefined) {
    return incomingConnection(undefined, () => socket['remoteAddress'] as string | undefined, headers as Record<string, string | string[] | undefined>);
  }
  throw coded(
    new Error(
      'ratekeeper: trpcRateLimit cannot tell which client made this call, as its context has no `req`; ' +
        'pass `key` (a user id from the context, say), or return the request from createContext',
    ),
    'ERR_RATEKEEPER_NO_CLIENT_ADDRESS',
  );
}

/**
 * Sets `Retry-After` on the response the context holds, if any: Node's `res`, or the Fetch
 * adapter's `resHeaders`. A batch shares one response, so the longest wait of its refused calls is
 * kept: a client retrying then finds none of them still refused for want of time.
 */
function setRetryAfter(ctx: unknown, seconds: number): void {
  const context = bag(ctx);
  const resHeaders = bag(context?.['resHeaders']);
  if (resHeaders !== undefined && typeof resHeaders['get'] === 'function' && typeof resHeaders['set'] === 'function') {
    const target = resHeaders as unknown as Headers;
    target.set('Retry-After', String(Math.max(seconds, Number(target.get('retry-after') ?? 0) || 0)));
    return;
  }
  const res = bag(context?.['res']);
  if (res !== undefined && typeof res['setHeader'] === 'function' && typeof res['getHeader'] === 'function' && res['headersSent'] === false) {
    const target = res as unknown as { getHeader(name: string): unknown; setHeader(name: string, value: string): unknown };
    target.setHeader('Retry-After', String(Math.max(seconds, Number(target.getHeader('retry-after') ?? 0) || 0)));
  }
}
