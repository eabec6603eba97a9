import type { Decision, Rejected } from '../core/decision';
import { optionalFunction } from './check';
import { type NodeRequestLike, type NodeResponseLike, settleOnClose } from './node-adapter';
import { quotaExceeded } from './problem';
import { incomingConnection, requestLimit, type RateLimitOptions, type RequestDecision } from './request-limit';

/** The part of Koa's `Context` the middleware uses, so that koa is never imported. */
export interface KoaContextLike {
  readonly method: string;
  /** Node's request: its socket's peer address and its headers. */
  readonly req: NodeRequestLike;
  /** Node's response, read only to settle after it (`skipFailedRequests`, `skipSuccessfulRequests`, `settle`). */
  readonly res: NodeResponseLike & { readonly destroyed?: boolean | undefined };
  /** Read only to warn that Koa's `proxy` setting is not what decides the client here. */
  readonly app: { readonly proxy?: boolean | undefined };
  /** Where the decision goes for the middleware after it: `ctx.state.rateLimit`. */
  readonly state: object;
  status: number;
  body: unknown;
  set(name: string, value: string): unknown;
}

/**
 * The state `koaRateLimit` sets, for an app's `StateT` (`new Koa<RateLimitState>()`), so that
 * `ctx.state.rateLimit` is typed; tRPC procedures read the same field on their context.
 *
 * @example
 * ```ts
 * import Koa from 'koa';
 * import type { RateLimitState } from 'ratekeeper/http';
 * const app = new Koa<RateLimitState>();
 * app.use((ctx) => {
 *   ctx.body = `${ctx.state.rateLimit?.remaining ?? 'unlimited'} left`;
 * });
 * ```
 */
export interface RateLimitState {
  /** The decision for this request (every policy's in `parts`); undefined when it was skipped. */
  rateLimit?: RequestDecision | undefined;
}

/**
 * Options of {@link koaRateLimit}; the callbacks receive Koa's context.
 *
 * @example
 * ```ts
 * import type { Context } from 'koa';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { KoaRateLimitOptions } from 'ratekeeper/http';
 * const options: KoaRateLimitOptions<Context> = {
 *   limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) }),
 *   key: (ctx) => ctx.get('x-api-key') || 'anonymous',
 *   onRejected: (ctx, decision) => {
 *     ctx.status = 503;
 *     ctx.body = { retryAfterMs: decision.retryAfterMs };
 *   },
 * };
 * ```
 */
export interface KoaRateLimitOptions<C extends KoaContextLike = KoaContextLike> extends RateLimitOptions<[ctx: C]> {
  /**
   * Answers a refused request, whose rate-limit fields are already set: set `ctx.status` and
   * `ctx.body`. A thrown error goes to Koa's error handling.
   * @default 429 with an `application/problem+json` quota-exceeded body
   */
  onRejected?: ((ctx: C, decision: Rejected) => void | Promise<void>) | undefined;
}

/**
 * Koa middleware (Koa 2 and 3): counts each request, answers a refused one itself, and sets the
 * rate-limit fields (`ctx.set`) before calling `next()` for an allowed one. The default key is the
 * socket's peer address; Koa's own `app.proxy` is not consulted (use `trustProxies`; the middleware
 * warns once when `app.proxy` is set without it). The decision is `ctx.state.rateLimit` (see
 * {@link RateLimitState}). Errors from the limiter or the callbacks go to Koa's error handling;
 * those while settling after the response, to `onSettleError`.
 *
 * @example
 * ```ts
 * import Koa from 'koa';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import { koaRateLimit } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * const app = new Koa();
 * app.use(koaRateLimit({ limiter, name: 'api', windowMs: 60_000, trustProxies: 1 }));
 * ```
 */
export function koaRateLimit<C extends KoaContextLike = KoaContextLike>(options: KoaRateLimitOptions<C>): (ctx: C, next: () => Promise<unknown>) => Promise<void> {
  const limit = requestLimit<[C]>(options, 'koaRateLimit');
  optionalFunction('onRejected', options.onRejected);
  const { onRejected } = options;
  // Koa's `app.proxy` makes `ctx.ip` trust X-Forwarded-For; a user who set it expects the same here.
  let warnAboutProxy = options.trustProxies === undefined && options.key === undefined;

  return async (ctx, next) => {
    if (warnAboutProxy && ctx.app.proxy === true) {
      warnAboutProxy = false;
      console.warn(
        "ratekeeper: koaRateLimit does not read Koa's `app.proxy`: every client behind your proxy shares the proxy's limit. " +
          'Set `trustProxies` to the number of proxies in front of the server (or pass `key`).',
      );
    }
    const verdict = await limit.check(incomingConnection(ctx.method, () => ctx.req.socket.remoteAddress, ctx.req.headers), ctx.req, ctx);
    if (verdict === undefined) {
      await next();
      return;
    }
    const { decision, headers } = verdict;
    (ctx.state as RateLimitState).rateLimit = decision;
    for (const name in headers) ctx.set(name, headers[name]!);
    if (!decision.allowed) {
      if (onRejected !== undefined) return onRejected(ctx, decision);
      const refusal = quotaExceeded(headers, verdict.policy);
      ctx.status = refusal.status;
      ctx.set('Content-Type', refusal.headers['Content-Type']!);
      ctx.body = refusal.body;
      return;
    }
    let finish = verdict.finish;
    if (finish === undefined) {
      await next();
      return;
    }
    const settleOnce = (status: number | undefined) => {
      const settling = finish;
      finish = undefined;
      return settling === undefined ? Promise.resolve() : settling(status);
    };
    settleOnClose(ctx.res, settleOnce, verdict.settles);
    try {
      await next();
    } catch (error) {
      // Koa answers it after this middleware has returned; the request failed whatever an error
      // handler above renders, so it settles now as the failure it is. Unless a status was sent
      // already (it decides, as over Node) or the client left before one (it counts in full).
      if (!ctx.res.headersSent && ctx.res.destroyed !== true) void settleOnce(errorStatus(error));
      throw error;
    }
  };
}

/** The status Koa answers a thrown error with when that is a failure (`ctx.throw(401)`), else 500. */
function errorStatus(error: unknown): number {
  const { status, statusCode } = (error ?? {}) as { status?: unknown; statusCode?: unknown };
  const given = status || statusCode;
  return typeof given === 'number' && Number.isInteger(given) && given >= 400 && given <= 599 ? given : 500;
}
