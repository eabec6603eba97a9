import { type Clock, systemClock } from '../core/clock';
import type { Decision } from '../core/decision';
import { ClosedError } from '../core/errors';
import { rangeError, typeError } from '../core/errors';
import type { Rule } from '../core/rule';
import { Closable } from '../core/symbols';
import { checkPermits, checkString, describe, integerIn } from '../core/validate';
import type { AcquireOptions } from '../limiter/acquire-options';
import type { AsyncRateLimiter } from '../limiter/keyed-rate-limiter';
import { schedulerFor, systemScheduler } from '../limiter/scheduler';
import { WaitQueue } from '../limiter/wait-queue';
import { BatchSender, type Call } from './batch-sender';
import { clientKeyPrefix, isClientClosed, isClusterClient, toScriptClient } from './client';
import { Coalescer, InFlight } from './coalescer';
import type { RedisRateLimiterOptions } from './options';
import type { RedisAlgorithm } from './scripts';
import { outagePolicy } from './outage-policy';
import { RefusalCache } from './refusal-cache';
import { plans } from './scripts';
import { claimNamespace } from './namespaces';
import { hashSlot } from './slot';
import { checkStoreOptions, report, toRule } from './store-options';
import { CallTimeouts } from './timeout';

/**
 * The most decisions one script call carries: enough to spread the cost of a call thin, few enough
 * that one script holds Redis (and its other clients) for only 50-100 µs. More calls waiting go as
 * several script calls of one round, back to back. Measured (docs/redis.md, "When calls are
 * batched"): 64 saved no CPU per decision over 32.
 */
const MAX_BATCH = 32;

/** The flight of a call sent alone, which holds no other call back. */
const ALONE = new InFlight();

/**
 * One shared rate limit per key across every server that talks to the same Redis. Each decision is
 * atomic in a Lua script, timed by the server's clock, and decided exactly as the in-memory
 * algorithm of the same name would. A call that finds nothing in flight goes at once; the calls
 * made while a round of script calls is in flight, in whatever tick, go together in the next (on a
 * Redis Cluster, one batch per hash slot), each deciding as if sent alone in the order asked.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { Rule } from 'ratekeeper';
 * import { RedisRateLimiter } from 'ratekeeper/redis';
 *
 * const limiter = new RedisRateLimiter({
 *   client: new Redis(),
 *   algorithm: 'token-bucket',
 *   rule: Rule.perSecond(10),
 *   onStoreError: 'allow',
 * });
 * const decision = await limiter.tryAcquire('user-42');
 * if (!decision.allowed) console.log(`retry in ${decision.retryAfterMs} ms`);
 * ```
 */
export class RedisRateLimiter extends Closable implements AsyncRateLimiter {
  /** The rule every key is limited by. */
  readonly rule: Rule;
  readonly #algorithm: RedisAlgorithm;
  readonly #prefix: string;
  readonly #name: string | undefined;
  readonly #timeoutMs: number;
  readonly #keyPrefix: string;
  readonly #clock: Clock | undefined;
  readonly #refusals: RefusalCache | undefined;
  readonly #waiting: WaitQueue;
  readonly #sender: BatchSender;
  /** Bounds each call to `timeoutMs` from its own start. */
  readonly #timeouts: CallTimeouts<Call>;
  /** Gathers calls into batches; undefined when batching is off and each call goes alone. */
  readonly #coalescer: Coalescer<Call> | undefined;
  /**
   * On a cluster a batch holds keys of one hash slot, computed on the key the server sees: this
   * prefix (ioredis's `keyPrefix`) and the limiter's own key; undefined elsewhere.
   */
  readonly #slotPrefix: string | undefined;

  /** @throws TypeError or RangeError naming the option, before anything is sent to Redis. */
  constructor(options: RedisRateLimiterOptions) {
    super();
    if (options === null || typeof options !== 'object') {
      throw typeError(`ratekeeper: RedisRateLimiter options must be an object, got ${describe(options)}`);
    }
    const { client, algorithm, rule, onStoreError, prefix = 'ratekeeper:', name, clock, timeoutMs = 500, onError, refusalCache = false, batch = true } = options;
    if (typeof algorithm !== 'string' || !Object.hasOwn(plans, algorithm)) {
      throw typeError(`ratekeeper: \`algorithm\` must be one of ${Object.keys(plans).map((name) => `'${name}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    this.rule = toRule(rule);
    this.#algorithm = algorithm;
    const scriptClient = toScriptClient(client);
    const plan = plans[algorithm];
    checkString('prefix', prefix);
    this.#prefix = prefix;
    this.#name = name;
    if (name !== undefined) {
      checkString('name', name);
      if (name === '') throw typeError('ratekeeper: `name` must be a non-empty string, got ""');
    }
    this.#keyPrefix = `${prefix}${name === undefined ? '' : `${name}:`}${algorithm}:${this.rule.limit}/${this.rule.windowMs}:`;
    claimNamespace(client, this.#keyPrefix, name !== undefined, (message) => console.warn(message));
    checkStoreOptions(clock, timeoutMs, onError);
    this.#clock = clock;
    this.#timeoutMs = timeoutMs;
    const policy = outagePolicy(onStoreError, { rule: this.rule, timeoutMs, report: (error, key) => report(onError, error, key) });
    this.#refusals = refusalCacheFor(refusalCache);
    if (typeof batch !== 'boolean') throw typeError(`ratekeeper: \`batch\` must be true or false, got ${describe(batch)}`);
    this.#sender = new BatchSender({
      client: scriptClient,
      plan,
      ruleArgs: plan.ruleArgs(this.rule),
      limit: this.rule.limit,
      callerClock: clock !== undefined,
      refusals: this.#refusals,
      fallback: (error, call) => {
        report(onError, error, call.key);
        return policy(error, call.key, call.permits);
      },
    });
    this.#timeouts = new CallTimeouts(timeoutMs, this.#sender.timedOut);
    this.#coalescer = batch ? new Coalescer(this.#sender.send, MAX_BATCH) : undefined;
    this.#slotPrefix = isClusterClient(client) ? clientKeyPrefix(client) : undefined;
    // A wait ends when the store can no longer answer: with a client closed for good, a degraded
    // refusal would be tried again for ever, its timer keeping the process alive.
    const attempt = (key: string, permits: number) =>
      this.tryAcquire(key, permits).then((decision) => {
        if (decision.allowed || decision.degraded === undefined || !isClientClosed(client)) return decision;
        throw new ClosedError('ratekeeper: the Redis client is closed, so this wait could never be granted');
      });
    this.#waiting = new WaitQueue(attempt, clock === undefined ? systemScheduler : schedulerFor(clock));
  }

  /**
   * Decides a request for `permits` (default 1) by `key`: one EVALSHA round trip, shared with the
   * calls made in the same tick or while the round ahead was in flight, or none when the refusal
   * cache already knows the answer. Never
   * rejects for a Redis failure: the outage policy answers instead, marked `degraded`.
   * @throws TypeError when `key` is not a string; RangeError when `permits` is not an integer from 1 to the limit (as a rejected promise).
   */
  tryAcquire(key: string, permits = 1): Promise<Decision> {
    try {
      checkString('key', key);
      checkPermits(permits, this.rule.limit);
    } catch (error) {
      return Promise.reject(error);
    }
    // Read only when something uses the reading: a caller's clock decides, or the refusal cache dates
    // what it remembers. Otherwise the server's clock alone decides.
    const now = this.#clock !== undefined ? this.#clock.now() : this.#refusals !== undefined ? systemClock.now() : 0;
    // A caller's clock is checked: NaN sent to Redis would come back as a NaN retry time.
    if (!Number.isFinite(now)) return Promise.reject(rangeError(`ratekeeper: \`clock\` returned ${describe(now)}, not a finite number`));
    const known = this.#refusals?.get(key, permits, now, this.rule.limit);
    if (known !== undefined) return Promise.resolve(known);
    return new Promise((resolve, reject) => {
      const redisKey = this.#keyPrefix + key;
      const call: Call = { key, redisKey, permits, now, resolve, reject, deadline: this.#timeouts.deadline(), answered: false, script: undefined };
      this.#timeouts.add(call);
      if (this.#coalescer === undefined) this.#sender.send([call], ALONE);
      else this.#coalescer.add(call, this.#slotPrefix === undefined ? 0 : hashSlot(this.#slotPrefix + redisKey));
    });
  }

  /**
   * Waits until `permits` (default 1) are granted to `key`, as `KeyedRateLimiter.acquire` does:
   * first in first out among this process's callers (one Redis call in flight per key), each head
   * woken by one timer at its exact `retryAfterMs`, no polling. Callers in other processes compete
   * for the same permits without a shared queue. During an outage the policy's answers apply: a
   * `'deny'` refusal waits and tries again, `'allow'` resolves at once. A wait never outlives the
   * store: once the client is closed for good (ioredis `quit()`, node-redis `quit()`/`close()`), a
   * refused waiter rejects with a `ClosedError` instead of trying again.
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   *
   * const limiter = new RedisRateLimiter({ client: new Redis(), algorithm: 'leaky-bucket', rule: Rule.perSecond(5), onStoreError: 'deny' });
   * const decision = await limiter.acquire('outbound-api', 1, { maxWaitMs: 2000, signal: AbortSignal.timeout(5000) });
   * if (decision.allowed) console.log('send it');
   * ```
   */
  acquire(key: string, permits = 1, options?: AcquireOptions): Promise<Decision> {
    return this.#waiting.acquire(key, permits, options);
  }

  /**
   * Ends waiting, as `KeyedRateLimiter.close` does: every `acquire` still waiting rejects with a
   * `ClosedError` (code `ERR_RATEKEEPER_CLOSED`), its timer is cleared, and later `acquire` calls
   * reject at once. `tryAcquire` keeps answering. The client is yours and stays open: quit it after.
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const client = new Redis();
   * const limiter = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: Rule.perSecond(5), onStoreError: 'deny' });
   * limiter.close();
   * await client.quit();
   * ```
   */
  override close(): void {
    this.#waiting.close();
  }

  /** A summary for logs and `JSON.stringify`: the algorithm, rule, key prefix, name (when given) and timeout; never the client. */
  override toJSON(): { algorithm: RedisAlgorithm; rule: Rule; prefix: string; name?: string; timeoutMs: number } {
    const { rule } = this;
    return this.#name === undefined
      ? { algorithm: this.#algorithm, rule, prefix: this.#prefix, timeoutMs: this.#timeoutMs }
      : { algorithm: this.#algorithm, rule, prefix: this.#prefix, name: this.#name, timeoutMs: this.#timeoutMs };
  }
}

function refusalCacheFor(option: unknown): RefusalCache | undefined {
  if (option === false) return undefined;
  if (option === true) return new RefusalCache(10_000);
  if (option !== null && typeof option === 'object') {
    return new RefusalCache(integerIn('refusalCache.maxKeys', (option as { maxKeys: unknown }).maxKeys, 1, Number.MAX_SAFE_INTEGER));
  }
  throw typeError(`ratekeeper: \`refusalCache\` must be true, false or { maxKeys }, got ${describe(option)}`);
}
