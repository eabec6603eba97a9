import type { Decision, Rejected } from '../core/decision';
import { typeError } from '../core/errors';
import { optionalFunction } from './check';
import { quotaExceeded } from './problem';
import { requestLimit, type RateLimitOptions, type RequestDecision } from './request-limit';
import { runtimePeer } from './runtime-peer';

/**
 * Options of {@link withRateLimit}; `Args` are what the server passes the handler after the `Request`.
 * `key`, `cost` and `skip` receive the request alone, so that only the handler decides `Args`.
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { FetchRateLimitOptions } from 'ratekeeper/http';
 * // Cloudflare Workers: the edge puts the client address in a header of its own.
 * const options: FetchRateLimitOptions = {
 *   limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) }),
 *   clientAddress: (request) => request.headers.get('cf-connecting-ip') ?? undefined,
 * };
 * ```
 */
export interface FetchRateLimitOptions<Args extends unknown[] = []> extends RateLimitOptions<[request: Request]> {
  /**
   * The peer address of a request, for the default key.
   * @default read from the handler's second argument on `@hono/node-server`, Bun (`server.requestIP`)
   * and Deno (`info.remoteAddr`); elsewhere (Next.js, Workers) pass this, `key` or `trustProxies`.
   */
  clientAddress?: ((request: Request, ...args: Args) => string | undefined) | undefined;
  /**
   * Builds the response to a refused request; rate-limit fields it does not set itself are added.
   * @default 429 with the fields and an `application/problem+json` quota-exceeded body
   */
  onRejected?: ((request: Request, decision: Rejected) => Response | Promise<Response>) | undefined;
}

const decisions = new WeakMap<Request, RequestDecision>();

/**
 * The decision `withRateLimit` reached for a request, for its handler to read; undefined for a
 * request it skipped (or never saw). A `Request` carries it to the handler whatever arguments the
 * runtime passes after it (Bun a server, Deno an info object, Next.js a context).
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import { rateLimitOf, withRateLimit } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * const handler = withRateLimit({ limiter, trustProxies: 1 }, (request) =>
 *   Response.json({ remaining: rateLimitOf(request)?.remaining }),
 * );
 * ```
 */
export function rateLimitOf(request: Request): RequestDecision | undefined {
  return decisions.get(request);
}

/**
 * Wraps a Fetch-API handler `(request, ...args) => Response` (Bun.serve, Deno.serve, Next.js route
 * handlers, `@hono/node-server`, Workers) so that each request is counted first: a refused one gets
 * the refusal without reaching the handler, an allowed one gets the rate-limit fields on its response
 * (those the handler did not set itself). The handler reads the decision with {@link rateLimitOf}.
 * Errors from the limiter or the callbacks reject the returned Promise, for the server to report;
 * those while settling after the response go to `onSettleError`. A handler that throws rejects it
 * too, and its request settles as a 500 response (`skipFailedRequests` gives its permits back).
 *
 * @example
 * ```ts
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * import { withRateLimit } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * // Deno.serve(handler), Bun.serve({ fetch: handler }), or `export const GET = handler` in Next.js
 * // (there with `trustProxies: 1`, since Next.js gives no peer address)
 * const handler = withRateLimit({ limiter, name: 'api', windowMs: 60_000 }, () => new Response('hello'));
 * ```
 */
export function withRateLimit<Args extends unknown[]>(
  options: FetchRateLimitOptions<Args>,
  handler: (request: Request, ...args: Args) => Response | Promise<Response>,
): (request: Request, ...args: Args) => Promise<Response> {
  const limit = requestLimit(options, 'withRateLimit');
  optionalFunction('clientAddress', options.clientAddress);
  optionalFunction('onRejected', options.onRejected);
  if (typeof handler !== 'function') throw typeError('ratekeeper: `handler` must be a function returning a Response');
  const { clientAddress, onRejected } = options;

  return async (request, ...args) => {
    const verdict = await limit.check(
      {
        method: request.method,
        header: (name) => request.headers.get(name) ?? undefined,
        peer: () => (clientAddress === undefined ? runtimePeer(args[0], request) : clientAddress(request, ...args)),
      },
      request,
      request,
    );
    if (verdict === undefined) return handler(request, ...args);
    const { decision, headers, finish } = verdict;
    decisions.set(request, decision);
    if (decision.allowed) {
      let response: Response;
      try {
        response = await handler(request, ...args);
      } catch (error) {
        // The server answers a handler that throws with a 500, as Express's and Fastify's do; the
        // request settles as that failure, and the error goes on to the server.
        if (finish !== undefined) void finish(500);
        throw error;
      }
      // The status is the server's choice once the handler has answered, whether or not the client stays.
      if (finish !== undefined) void finish(response.status);
      return withHeaders(response, headers);
    }
    if (onRejected !== undefined) return withHeaders(await onRejected(request, decision), headers);
    const refusal = quotaExceeded(headers, verdict.policy);
    return new Response(refusal.body, { status: refusal.status, headers: refusal.headers });
  };
}

/**
 * Adds the fields a response does not set itself, so a handler can override them. A response from
 * `fetch()` or `Response.redirect()` has immutable headers, so the fields go on a copy; a protocol
 * upgrade (101) can be neither changed nor copied, and goes out as it is.
 */
export function withHeaders(response: Response, headers: Record<string, string>): Response {
  const entries = Object.entries(headers).filter(([name]) => !response.headers.has(name));
  try {
    for (const [name, value] of entries) response.headers.set(name, value);
    return response;
  } catch {
    if (response.status < 200) return response;
    const copy = new Response(response.body, response);
    for (const [name, value] of entries) copy.headers.set(name, value);
    return copy;
  }
}
