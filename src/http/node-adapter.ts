import type { Rejected } from '../core/decision';
import { typeError } from '../core/errors';
import { optionalFunction } from './check';
import { PROBLEM_JSON, quotaExceeded } from './problem';
import { incomingConnection, requestLimit, type RateLimitOptions, type RequestDecision } from './request-limit';

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
  /** Needed only to settle after the response (`skipFailedRequests`, `skipSuccessfulRequests`, `settle`). */
  once?(event: 'close', listener: () => void): unknown;
}

declare global {
  // Express's own request type, so that `req.rateLimit` type-checks in an Express app.
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /**
       * The decision `nodeRateLimit` reached for this request (the binding policy's, every policy's in
       * `parts`); undefined when it was skipped.
       */
      rateLimit?: RequestDecision;
    }
  }
}

/**
 * Settles a request once its response is done: by the status the server sent, even if the client
 * left before the body ended. A client that leaves before any status was sent gets nothing back
 * (`settle` is not called): the server may have done the work, and disconnecting must never earn
 * a refund (under `skipSuccessfulRequests` it would make password guesses free); its in-flight
 * permits are let go all the same.
 */
export function settleOnClose(res: NodeResponseLike | undefined, finish: (status: number | undefined) => Promise<void>, settles: boolean): void {
  if (typeof res?.once !== 'function') {
    // Without settling options finishing only lets go of a reservation in memory, which a key
    // bounds anyway (64 receipts): a response without a close event does without.
    if (!settles) return;
    throw typeError('ratekeeper: settling after the response needs a response with once("close"), as Node\'s has');
  }
  res.once('close', () => {
    // A client gone before any status: nothing given back, but what is held in flight is let go.
    void finish(res.headersSent ? res.statusCode : undefined);
  });
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
 * of an allowed one before calling `next()`. The default key is `req.socket.remoteAddress`. The
 * decision is `req.rateLimit` for the handlers after it. Errors from the limiter or the callbacks
 * go to `next(error)`; those while settling after the response, to `onSettleError`.
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
    const verdict = await limit.check(incomingConnection(req.method, () => req.socket.remoteAddress, req.headers), req, req);
    if (verdict === undefined) return true;
    const { decision, headers, finish } = verdict;
    (req as { rateLimit?: RequestDecision }).rateLimit = decision;
    if (!res.headersSent) for (const name in headers) res.setHeader(name, headers[name]!);
    if (finish !== undefined) settleOnClose(res, finish, verdict.settles);
    if (decision.allowed) return true;
    if (onRejected !== undefined) {
      await onRejected(req, res, decision);
      return false;
    }
    const refusal = quotaExceeded(headers, verdict.policy);
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
