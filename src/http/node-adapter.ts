import type { Rejected } from '../core/decision';
import { optionalFunction } from './check';
import { PROBLEM_JSON, quotaExceeded } from './problem';
import { incomingConnection, requestLimit, type RateLimitOptions } from './request-limit';

/**
 * The part of Node's `IncomingMessage` the middleware reads. Declared here rather than imported, so
 * that `ratekeeper/http` type-checks in projects without `@types/node` (Workers, Deno).
 */
export interface NodeRequestLike {
  readonly method?: string | undefined;
  readonly socket: { readonly remoteAddress?: string | undefined };
  readonly headers: Record<string, string | string[] | undefined>;
}

/** The part of Node's `ServerResponse` the middleware writes. */
export interface NodeResponseLike {
  statusCode: number;
  readonly headersSent: boolean;
  setHeader(name: string, value: string): unknown;
  end(body: string): unknown;
}

/**
 * Options of {@link nodeRateLimit}; the callbacks receive the request (an Express `Request` under Express).
 *
 * @example
 * ```ts
 * import type { Request, Response } from 'express';
 * import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * import type { NodeRateLimitOptions } from 'ratekeeper/http';
 * const options: NodeRateLimitOptions<Request, Response> = {
 *   limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) }),
 *   onRejected: (_req, res, decision) => void res.status(429).json({ retryAfterMs: decision.retryAfterMs }),
 * };
 * ```
 */
export interface NodeRateLimitOptions<Req extends NodeRequestLike = NodeRequestLike, Res extends NodeResponseLike = NodeResponseLike>
  extends RateLimitOptions<[req: Req]> {
  /**
   * Answers a refused request, whose rate-limit fields are already set on `res`. It must end the
   * response; a thrown error goes to `next(error)`.
   * @default 429 with an `application/problem+json` quota-exceeded body
   */
  onRejected?: ((req: Req, res: Res, decision: Rejected) => void | Promise<void>) | undefined;
}

/**
 * Connect-style middleware `(req, res, next)` for Express, Connect, or a bare `node:http` server:
 * counts each request, answers a refused one itself, and sets the rate-limit fields on the response
 * of an allowed one before calling `next()`. The default key is `req.socket.remoteAddress`.
 * Errors from the limiter or the callbacks go to `next(error)`.
 *
 * @example
 * ```ts
 * import express from 'express';
 * import { KeyedRateLimiter, TokenBucket, Rule } from 'ratekeeper';
 * import { nodeRateLimit } from 'ratekeeper/http';
 * const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * const app = express();
 * app.use(nodeRateLimit({ limiter, name: 'api', windowMs: 60_000, trustProxies: 1 }));
 * ```
 */
export function nodeRateLimit<Req extends NodeRequestLike = NodeRequestLike, Res extends NodeResponseLike = NodeResponseLike>(
  options: NodeRateLimitOptions<Req, Res>,
): (req: Req, res: Res, next: (error?: unknown) => void) => void {
  const limit = requestLimit<[Req]>(options, 'nodeRateLimit');
  optionalFunction('onRejected', options.onRejected);
  const { onRejected } = options;

  /** Resolves true when the request may go on; the response is ended otherwise. */
  const admit = async (req: Req, res: Res): Promise<boolean> => {
    const verdict = await limit.check(incomingConnection(req.method, () => req.socket.remoteAddress, req.headers), req);
    if (verdict === undefined) return true;
    const { decision, headers } = verdict;
    if (!res.headersSent) for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
    if (decision.allowed) return true;
    if (onRejected !== undefined) {
      await onRejected(req, res, decision);
      return false;
    }
    const refusal = quotaExceeded(headers, limit.name);
    res.statusCode = refusal.status;
    res.setHeader('Content-Type', PROBLEM_JSON);
    res.end(refusal.body);
    return false;
  };

  // The error handler sits beside the success handler, not after it: an error thrown downstream of
  // `next()` is no limiter failure and must not reach `next` a second time.
  return (req, res, next) => {
    admit(req, res).then((go) => {
      if (go) next();
    }, next);
  };
}
