import type { Rejected } from '../core/decision';
import { optionalFunction } from './check';
import { type NodeResponseLike, settleOnClose } from './node-adapter';
import { PROBLEM_JSON, quotaExceeded } from './problem';
import { incomingConnection, requestLimit, type RateLimitOptions, type RequestDecision } from './request-limit';

/** The part of Fastify's request the hook uses, so that fastify is never imported. */
export interface FastifyRequestLike {
  readonly method?: string | undefined;
  readonly raw: { readonly socket: { readonly remoteAddress?: string | undefined } };
  readonly headers: Record<string, string | string[] | undefined>;
}

/** The part of Fastify's reply the hook uses. */
export interface FastifyReplyLike {
  code(statusCode: number): unknown;
  header(name: string, value: string): unknown;
  send(payload?: unknown): unknown;
  /** Node's response, read only to settle after it (`skipFailedRequests`, `skipSuccessfulRequests`, `settle`). */
  readonly raw?: NodeResponseLike;
}

/**
 * Options of {@link fastifyRateLimit}; the callbacks receive Fastify's request.
 *
 * @example
 * ```ts
 * import type { FastifyReply, FastifyRequest } from 'fastify';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { FastifyRateLimitOptions } from 'ratekeeper/http';
 * const options: FastifyRateLimitOptions<FastifyRequest, FastifyReply> = {
 *   limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) }),
 *   key: (request) => request.ip,
 *   onRejected: (_request, reply) => void reply.code(503).send('busy'),
 * };
 * ```
 */
export interface FastifyRateLimitOptions<Req extends FastifyRequestLike = FastifyRequestLike, Reply extends FastifyReplyLike = FastifyReplyLike>
  extends RateLimitOptions<[request: Req]> {
  /**
   * Answers a refused request, whose rate-limit fields are already set on `reply`. It must send the
   * reply; a thrown error goes to Fastify's error handler.
   * @default 429 with an `application/problem+json` quota-exceeded body
   */
  onRejected?: ((request: Req, reply: Reply, decision: Rejected) => void | Promise<void>) | undefined;
}

/**
 * A Fastify `onRequest` hook: counts each request, answers a refused one itself, and sets the
 * rate-limit fields on the reply of an allowed one. Add it globally with `addHook` or per route in
 * the route's `onRequest` option. The default key is the socket's peer address (Fastify's own
 * `trustProxy` is not consulted; use `trustProxies`). The decision is `request.rateLimit` for the
 * handlers after it (declare it on `FastifyRequest`, as docs/http.md shows). Errors go to Fastify's
 * error handler; those while settling after the response, to `onSettleError`.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * import { fastifyRateLimit } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * const app = Fastify();
 * app.addHook('onRequest', fastifyRateLimit({ limiter, name: 'api', windowMs: 60_000 }));
 * ```
 */
export function fastifyRateLimit<Req extends FastifyRequestLike = FastifyRequestLike, Reply extends FastifyReplyLike = FastifyReplyLike>(
  options: FastifyRateLimitOptions<Req, Reply>,
  // NoInfer: a route's `onRequest` option must not infer the types from the hook's expected signature
  // (TypeScript would pick `never`); they come from annotated callbacks or default to the shapes above.
): (request: NoInfer<Req>, reply: NoInfer<Reply>) => Promise<Reply | undefined> {
  const limit = requestLimit<[Req]>(options, 'fastifyRateLimit');
  optionalFunction('onRejected', options.onRejected);
  const { onRejected } = options;

  return async (request, reply) => {
    const verdict = await limit.check(incomingConnection(request.method, () => request.raw.socket.remoteAddress, request.headers), request.raw, request);
    if (verdict === undefined) return undefined;
    const { decision, headers, finish } = verdict;
    (request as { rateLimit?: RequestDecision }).rateLimit = decision;
    for (const [name, value] of Object.entries(headers)) reply.header(name, value);
    if (finish !== undefined) settleOnClose(reply.raw, finish, verdict.settles);
    if (decision.allowed) return undefined;
    if (onRejected !== undefined) {
      await onRejected(request, reply, decision);
    } else {
      const refusal = quotaExceeded(headers, verdict.policy);
      reply.code(refusal.status);
      reply.header('Content-Type', PROBLEM_JSON);
      // Bytes, not a string: Fastify appends `; charset=utf-8` to a string's type, which JSON media types do not define.
      reply.send(new TextEncoder().encode(refusal.body));
    }
    // An async hook that has answered returns the reply, which tells Fastify to stop the chain.
    return reply;
  };
}
