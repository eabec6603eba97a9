import { type Clock, systemClock } from '../core/clock';
import type { Decision } from '../core/decision';
import { ClosedError } from '../core/errors';
import { rangeError, typeError } from '../core/errors';
import type { Rule } from '../core/rule';
import { Closable } from '../core/symbols';
import { checkCharge } from '../algorithms/accounting';
import { checkPermits, checkString, describe, integerIn } from '../core/validate';
import type { AcquireOptions } from '../limiter/acquire-options';
import type { AsyncRateLimiter } from '../limiter/keyed-rate-limiter';
import { MAX_BLOCK_MS } from '../limiter/key-blocks';
import { AsyncKeyReservation, type AsyncReservation } from '../limiter/reservation';
import { schedulerFor, systemScheduler } from '../limiter/scheduler';
import { WaitQueue } from '../limiter/wait-queue';
import { BatchSender, type Call } from './batch-sender';
import { clientKeyPrefix, isClientClosed, isClusterClient, toScriptClient } from './client';
import { Coalescer, InFlight } from './coalescer';
import { KeyOperations } from './key-operations';
import { legacySplit, operationDecision, operationDone, receiptId } from './protocol';
import type { RedisRateLimiterOptions } from './options';
import type { RedisAlgorithm } from './scripts';
import { outagePolicy, peekOutagePolicy } from './outage-policy';
import { RefusalCache } from './refusal-cache';
import { plans } from './scripts';
import { startUp } from './readiness';
import { claimNamespace } from './namespaces';
import { hashSlot } from './slot';
import { checkStoreOptions, report, toRule } from './store-options';
import { CallTimeouts } from './timeout';

/**
 * The most decisions one script call carries. Small enough that a full batch leaves at once, beside
 * the round, instead of waiting for it, and that one script holds Redis (and its other clients)
 * only briefly; 16 beat 32 with 64 callers (bench/HISTORY.md).
 */
const MAX_BATCH = 16;

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
  readonly #operations: KeyOperations;
  /** Answers a failed call by the outage policy, after reporting the cause to `onError`. */
  readonly #fallback: (policy: Policy, error: unknown, key: string, permits: number) => Decision | Promise<Decision>;
  readonly #policy: Policy;
  /** The policy for `peek`: a fallback limiter is asked its own `peek`, which spends nothing. */
  readonly #peekPolicy: Policy;

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
    const { script } = plans[algorithm];
    checkString('prefix', prefix);
    this.#prefix = prefix;
    this.#name = name;
    if (name !== undefined) {
      checkString('name', name);
      if (name === '') throw typeError('ratekeeper: `name` must be a non-empty string, got ""');
    }
    this.#keyPrefix = `${prefix}${name === undefined ? '' : `${name}:`}${algorithm}:`;
    claimNamespace(client, this.#keyPrefix, name !== undefined, (message) => console.warn(message));
    checkStoreOptions(clock, timeoutMs, onError);
    this.#clock = clock;
    this.#timeoutMs = timeoutMs;
    const context = { rule: this.rule, timeoutMs, report: (error: unknown, key: string) => report(onError, error, key) };
    const policy = outagePolicy(onStoreError, context);
    this.#policy = policy;
    this.#peekPolicy = peekOutagePolicy(onStoreError, context);
    this.#fallback = (chosen, error, key, permits) => {
      report(onError, error, key);
      return chosen(error, key, permits);
    };
    this.#refusals = refusalCacheFor(refusalCache);
    const starting = startUp(client);
    // On a cluster the previous version's key is in another slot, out of the script's reach.
    const split = isClusterClient(client) ? 0 : legacySplit(clientKeyPrefix(client) + this.#keyPrefix);
    if (typeof batch !== 'boolean') throw typeError(`ratekeeper: \`batch\` must be true or false, got ${describe(batch)}`);
    this.#sender = new BatchSender({
      client: scriptClient,
      script,
      split,
      callerClock: clock !== undefined,
      refusals: this.#refusals,
      fallback: (error, call) => {
        report(onError, error, call.key);
        return policy(error, call.key, call.permits);
      },
      startUp: starting,
    });
    this.#timeouts = new CallTimeouts(timeoutMs, this.#sender.timedOut);
    this.#coalescer = batch ? new Coalescer(this.#sender.send, MAX_BATCH, scriptClient.ordered === true) : undefined;
    this.#slotPrefix = isClusterClient(client) ? clientKeyPrefix(client) : undefined;
    this.#operations = new KeyOperations({ client: scriptClient, script, split, clock, timeoutMs, startUp: starting });
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
      const call: Call = { key, redisKey, permits, now, rule: this.rule, resolve, reject, deadline: this.#timeouts.deadline(), answered: false, script: undefined };
      this.#timeouts.add(call);
      if (this.#coalescer === undefined) this.#sender.send([call], ALONE);
      else this.#coalescer.add(call, this.#slotPrefix === undefined ? 0 : hashSlot(this.#slotPrefix + redisKey));
    });
  }

  /**
   * What `tryAcquire(key, permits)` would answer now (a block included), spending nothing and
   * creating no key: one script call that only reads. `permits` 0 answers the state now, for a
   * dashboard: `remaining` is the whole permits available now, `resetAfterMs` the time until the
   * key is as new, and `allowed` is false only while the key is blocked. While Redis fails, the
   * outage policy answers as for `tryAcquire` (a fallback limiter is asked its own `peek`).
   * @throws as `tryAcquire` does (as a rejected promise).
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const limiter = new RedisRateLimiter({ client: new Redis(), algorithm: 'token-bucket', rule: Rule.perMinute(60), onStoreError: 'deny' });
   * const { remaining } = await limiter.peek('user-1', 0); // what is left now; nothing spent
   * ```
   */
  peek(key: string, permits = 1): Promise<Decision> {
    let reply: Promise<unknown>;
    try {
      checkString('key', key);
      if (permits !== 0) checkPermits(permits, this.rule.limit);
      reply = this.#operations.run(this.#keyPrefix + key, 'peek', this.#operations.reading(), this.rule, [String(permits)]);
    } catch (error) {
      return Promise.reject(error);
    }
    return reply.then((reply) => operationDecision(reply, this.rule.limit)).catch((error: unknown) => this.#fallback(this.#peekPolicy, error, key, permits));
  }

  /**
   * Forgets `key`: its counts and any block are gone (the Redis key is deleted), and every later
   * decision is a never-seen key's. This process's callers waiting on it in `acquire` are tried
   * again at once. Outstanding reservations of the key give nothing back.
   * @throws TypeError for a key that is not a string; the client's error or a `RedisTimeoutError`
   * when Redis fails (as a rejected promise).
   */
  reset(key: string): Promise<void> {
    let reply: Promise<unknown>;
    try {
      checkString('key', key);
      reply = this.#operations.run(this.#keyPrefix + key, 'reset', '', this.rule, []);
    } catch (error) {
      return Promise.reject(error);
    }
    return reply.then((reply) => {
      operationDone(reply, this.rule.limit);
      this.#madeRoom(key);
    });
  }

  /**
   * Counts `permits` that were already used (a failed login, tokens an upstream consumed): never
   * refused, and `permits` may exceed the limit. What fits is spent exactly as `tryAcquire` would;
   * beyond that the key goes into debt, at most one full limit deep (the rest is forgiven), and is
   * refused until the debt is repaid, with exact `retryAfterMs`; the key's expiry covers the debt.
   * A block neither stops a charge nor is lifted by one. Resolves with the key's state after, as
   * `peek(key, 0)` would without a block.
   * @throws TypeError for a key that is not a string; RangeError when `permits` is not a positive
   * safe integer; the client's error or a `RedisTimeoutError` when Redis fails (as a rejected promise).
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const failures = new RedisRateLimiter({ client: new Redis(), algorithm: 'fixed-window', rule: Rule.perMinute(10), onStoreError: 'deny' });
   * await failures.charge('alice', 14); // 4 in debt until the minute ends
   * ```
   */
  charge(key: string, permits: number): Promise<Decision> {
    return this.#charge(key, permits, []);
  }

  /** A charge; with a receipt id, of a reservation settled above what it reserved (its receipt is released). */
  #charge(key: string, permits: number, receipt: string[]): Promise<Decision> {
    let reply: Promise<unknown>;
    try {
      checkString('key', key);
      checkCharge(permits);
      reply = this.#operations.run(this.#keyPrefix + key, 'charge', this.#operations.reading(), this.rule, [String(permits), ...receipt]);
    } catch (error) {
      return Promise.reject(error);
    }
    return reply.then((reply) => operationDecision(reply, this.rule.limit));
  }

  /**
   * Refuses every request of `key` for `durationMs` from now, spending nothing, as
   * `KeyedRateLimiter.block` does: each refusal's `retryAfterMs` is the longer of the time left and
   * what the algorithm alone would say; a shorter block never shortens a longer one; only `reset`
   * lifts it. The block is kept in the key, apart from its counts (no charge or refund touches
   * it), and the key's expiry covers it. `durationMs` is a whole number of ms from 0 to 2^42
   * (about 139 years: a block "for ever").
   * @throws TypeError for a key that is not a string; RangeError for a duration out of range
   * (Infinity included); the client's error or a `RedisTimeoutError` when Redis fails (as a rejected promise).
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const logins = new RedisRateLimiter({ client: new Redis(), algorithm: 'sliding-window-log', rule: Rule.perHour(10), onStoreError: 'deny' });
   * await logins.block('alice', 3_600_000);
   * (await logins.tryAcquire('alice')).retryAfterMs; // 3600000
   * ```
   */
  block(key: string, durationMs: number): Promise<void> {
    let reply: Promise<unknown>;
    try {
      checkString('key', key);
      integerIn('durationMs', durationMs, 0, MAX_BLOCK_MS);
      const reading = this.#operations.reading();
      if (durationMs === 0) return Promise.resolve();
      reply = this.#operations.run(this.#keyPrefix + key, 'block', reading, this.rule, [String(durationMs)]);
    } catch (error) {
      return Promise.reject(error);
    }
    return reply.then((reply) => operationDone(reply, this.rule.limit));
  }

  /**
   * Grants (or refuses) `permits` (default 1) now, exactly as `tryAcquire`, for a request whose real
   * cost is known only later: settle the reservation once with that cost. What was not used is
   * given back exactly (only what is still counted: never what time already repaid, never in
   * another window, nothing after a reset or after a charge reached the debt bound), what was over
   * is charged. The key keeps what the refund needs beside its counts, so a reservation settles
   * through any limiter process. While Redis fails the outage policy decides, and the reservation
   * has nothing to settle.
   * @throws as `tryAcquire` does (as a rejected promise).
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const tokens = new RedisRateLimiter({ client: new Redis(), algorithm: 'token-bucket', rule: Rule.perMinute(10_000), onStoreError: 'deny' });
   * const reservation = await tokens.reserve('team-1', 2000);
   * if (reservation.decision.allowed) await reservation.settle(500); // 1500 were not used
   * ```
   */
  reserve(key: string, permits = 1): Promise<AsyncReservation> {
    let reply: Promise<unknown>;
    // The receipt's id, drawn here: a key reset and reserved again holds others, so an old receipt
    // gives nothing back (a chance of 2^-52 that it matches).
    const receipt = receiptId();
    try {
      checkString('key', key);
      checkPermits(permits, this.rule.limit);
      reply = this.#operations.run(this.#keyPrefix + key, 'reserve', this.#operations.reading(), this.rule, [String(permits), receipt]);
    } catch (error) {
      return Promise.reject(error);
    }
    const degraded = async (error: unknown) => new AsyncKeyReservation(await this.#fallback(this.#policy, error, key, permits), undefined);
    return reply.then((reply) => {
      let decision: Decision;
      try {
        decision = operationDecision(reply, this.rule.limit);
      } catch (error) {
        return degraded(error);
      }
      return new AsyncKeyReservation(decision, decision.allowed ? (actual) => this.#settle(key, permits, receipt, actual) : undefined);
    }, degraded);
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

  /** Settles a reservation: charges what was over, or gives back what was not used (only what is still counted). */
  #settle(key: string, reserved: number, receipt: string, actual: number): Promise<Decision> {
    if (actual > reserved) return this.#charge(key, actual - reserved, [receipt]);
    let reply: Promise<unknown>;
    try {
      reply = this.#operations.run(this.#keyPrefix + key, 'refund', this.#operations.reading(), this.rule, [String(reserved - actual), receipt]);
    } catch (error) {
      return Promise.reject(error);
    }
    return reply.then((reply) => {
      const decision = operationDecision(reply, this.rule.limit);
      if (actual < reserved) this.#madeRoom(key);
      return decision;
    });
  }

  /** A reset or refund may have made room: a refusal remembered is stale, and waiters may go. */
  #madeRoom(key: string): void {
    this.#refusals?.forget(key);
    this.#waiting.wake(key);
  }

  /** A summary for logs and `JSON.stringify`: the algorithm, rule, key prefix, name (when given) and timeout; never the client. */
  override toJSON(): { algorithm: RedisAlgorithm; rule: Rule; prefix: string; name?: string; timeoutMs: number } {
    const { rule } = this;
    return this.#name === undefined
      ? { algorithm: this.#algorithm, rule, prefix: this.#prefix, timeoutMs: this.#timeoutMs }
      : { algorithm: this.#algorithm, rule, prefix: this.#prefix, name: this.#name, timeoutMs: this.#timeoutMs };
  }
}

type Policy = (error: unknown, key: string, permits: number) => Decision | Promise<Decision>;

/** The refusal cache's bounds when `true` (or an object) leaves them out. */
const REFUSAL_CACHE_KEYS = 10_000;
const REFUSAL_CACHE_MS = 1000;

function refusalCacheFor(option: unknown): RefusalCache | undefined {
  if (option === false) return undefined;
  if (option === true) return new RefusalCache(REFUSAL_CACHE_KEYS, REFUSAL_CACHE_MS);
  if (option !== null && typeof option === 'object' && !Array.isArray(option)) {
    const { maxKeys = REFUSAL_CACHE_KEYS, maxMs = REFUSAL_CACHE_MS } = option as { maxKeys?: unknown; maxMs?: unknown };
    return new RefusalCache(integerIn('refusalCache.maxKeys', maxKeys, 1, Number.MAX_SAFE_INTEGER), integerIn('refusalCache.maxMs', maxMs, 1, Number.MAX_SAFE_INTEGER));
  }
  throw typeError(`ratekeeper: \`refusalCache\` must be true, false or { maxKeys?, maxMs? }, got ${describe(option)}`);
}
