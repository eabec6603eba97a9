import type { Decision, Rejected } from '../core/decision';
import { optionalFunction } from './check';
import { withHeaders } from './fetch-adapter';
import { quotaExceeded } from './problem';
import { requestLimit, type RateLimitOptions, type RequestDecision } from './request-limit';
import { runtimePeer } from './runtime-peer';

/** The part of Hono's `Context` the middleware uses, so that hono is never imported. */
export interface HonoContextLike {
  readonly req: {
    readonly raw: Request;
    readonly method: string;
    readonly path: string;
    header(name: string): string | undefined;
  };
  /** Hono's bindings: on `@hono/node-server`, Bun and Deno they hold the peer address. */
  readonly env: unknown;
  readonly res: Response;
  header(name: string, value: string): void;
  /** Where the decision goes for the handlers: `c.get('rateLimit')`. */
  set(key: 'rateLimit', value: Decision): void;
}

/**
 * The variable `honoRateLimit` sets, for an app's `Env`, so that `c.get('rateLimit')` is typed.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import type { RateLimitVariables } from 'ratekeeper/http';
 * const app = new Hono<{ Variables: RateLimitVariables }>();
 * app.get('/', (c) => c.text(`${c.get('rateLimit')?.remaining ?? 'unlimited'} left`));
 * ```
 */
export interface RateLimitVariables {
  /** The decision for this request (every policy's in `parts`); undefined when it was skipped. */
  rateLimit: RequestDecision | undefined;
}

/**
 * Options of {@link honoRateLimit}; the callbacks receive Hono's context. Hono cannot pass its own
 * `Context` type through `app.use`, so the callbacks see {@link HonoContextLike} unless given the
 * type, as here.
 *
 * @example
 * ```ts
 * import type { Context } from 'hono';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { HonoRateLimitOptions } from 'ratekeeper/http';
 * type AppEnv = { Variables: { userId: string } };
 * const options: HonoRateLimitOptions<Context<AppEnv>> = {
 *   limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) }),
 *   key: (c) => c.get('userId'),
 * };
 * ```
 */
export interface HonoRateLimitOptions<C extends HonoContextLike = HonoContextLike> extends RateLimitOptions<[c: C]> {
  /**
   * The peer address of a request, for the default key; e.g. `(c) => getConnInfo(c).remote.address`.
   * @default read from `c.env` on `@hono/node-server`, Bun and Deno; elsewhere (Workers, Vercel) pass
   * this, `key` or `trustProxies`
   */
  clientAddress?: ((c: C) => string | undefined) | undefined;
  /**
   * Builds the response to a refused request; rate-limit fields it does not set itself are added.
   * @default 429 with the fields and an `application/problem+json` quota-exceeded body
   */
  onRejected?: ((c: C, decision: Rejected) => Response | Promise<Response>) | undefined;
}

/**
 * Hono middleware: counts each request, answers a refused one itself, and adds the rate-limit
 * fields to the response of an allowed one. The decision is `c.get('rateLimit')` for the handlers
 * (see {@link RateLimitVariables}). Errors from the limiter or the callbacks go to Hono's error
 * handler; those while settling after the response, to `onSettleError`. A request whose handler
 * throws something other than an `Error` (which Hono passes on to the server) settles as a 500.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * import { honoRateLimit } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * const app = new Hono();
 * app.use('/api/*', honoRateLimit({ limiter, name: 'api', windowMs: 60_000 }));
 * ```
 */
export function honoRateLimit<C extends HonoContextLike = HonoContextLike>(
  options: HonoRateLimitOptions<C>,
): (c: C, next: () => Promise<void>) => Promise<Response | undefined> {
  const limit = requestLimit<[C]>(options, 'honoRateLimit');
  optionalFunction('clientAddress', options.clientAddress);
  optionalFunction('onRejected', options.onRejected);
  const { clientAddress, onRejected } = options;

  return async (c, next) => {
    const verdict = await limit.check(
      {
        method: c.req.raw.method,
        header: (name) => c.req.raw.headers.get(name) ?? undefined,
        peer: () => (clientAddress === undefined ? runtimePeer(c.env, c.req.raw) : clientAddress(c)),
      },
      c.req.raw,
      c,
    );
    if (verdict === undefined) {
      await next();
      return undefined;
    }
    const { decision, headers, finish } = verdict;
    c.set('rateLimit', decision);
    if (decision.allowed) {
      try {
        await next();
      } catch (error) {
        // Hono hands an `Error` to its error handler and `c.res` holds the answer; anything else
        // thrown (a string, a Response) comes out of `next()`, and the server answers 500.
        if (finish !== undefined) void finish(500);
        throw error;
      }
      // The status is the server's choice once the handler has answered, whether or not the client stays.
      if (finish !== undefined) void finish(c.res.status);
      for (const [name, value] of Object.entries(headers)) {
        if (!c.res.headers.has(name)) c.header(name, value);
      }
      return undefined;
    }
    if (onRejected !== undefined) return withHeaders(await onRejected(c, decision), headers);
    const refusal = quotaExceeded(headers, verdict.policy);
    return new Response(refusal.body, { status: refusal.status, headers: refusal.headers });
  };
}
