import { checkCharge } from '../algorithms/accounting';
import { type Concurrency, unreleasable } from '../algorithms/concurrency';
import { type Clock, systemClock } from '../core/clock';
import type { Decision } from '../core/decision';
import { ClosedError, rangeError } from '../core/errors';
import { Rule, sharedPerRule } from '../core/rule';
import { Closable } from '../core/symbols';
import { checkPermits, describe, integerIn, isThenable } from '../core/validate';
import type { AcquireOptions } from '../limiter/acquire-options';
import { ADMIT_JOINTLY, type AdmissionPart, type AdmitOptions, type Held, type JointlyAdmitting, type StoreAdmission } from '../limiter/admit';
import { MAX_BLOCK_MS } from '../limiter/key-blocks';
import type { AsyncRateLimiter } from '../limiter/keyed-rate-limiter';
import { AsyncKeyReservation, type AsyncLease, type AsyncReservation } from '../limiter/reservation';
import { schedulerFor, systemScheduler } from '../limiter/scheduler';
import { type Turn, WaitQueue } from '../limiter/wait-queue';
import { Coalescer, InFlight } from './coalescer';
import { MAX_SAFE } from './constants';
import { noteWindow } from './decision-window';
import type { InFlightLimit, Operation, StoreCall, StoreEngine } from './engine';
import { storeNamespace } from './keys';
import { type Outage, outagePolicy, peekOutagePolicy, type StoreErrorPolicy } from './outage-policy';
import type { RefusalCache } from './refusal-cache';
import { checkConcurrency, checkStoreOptions, refusalCacheFor, report, toRule } from './store-options';
import { Gathering } from './gathering';
import { admitJointly, JOINT, type JointPart } from './joint-admission';
import { CallTimeouts } from './timeout';

/**
 * A rule chosen per key: called with the key on every call, it answers the key's rule (a tenant's
 * plan, say), at once or as a promise.
 *
 * @example
 * ```ts
 * import { Rule } from 'ratekeeper';
 * import type { RuleOf } from 'ratekeeper/redis';
 * const plans = { free: Rule.perMinute(60), pro: Rule.perMinute(6000) };
 * const rule: RuleOf = (key) => (key.startsWith('pro:') ? plans.pro : plans.free);
 * ```
 */
export type RuleOf = (key: string) => Rule | Promise<Rule>;

/**
 * What the store layer reads of a limiter's options (each store adds its own). With `concurrency`
 * and neither `algorithm` nor `rule`, the limiter is an in-flight limit alone: its keys are named
 * `'concurrency'` where an algorithm would be.
 */
export interface StoreLimiterOptions<R extends Rule | RuleOf> {
  readonly algorithm: string | undefined;
  readonly rule: R | undefined;
  readonly concurrency: Concurrency | undefined;
  readonly onStoreError: StoreErrorPolicy;
  readonly prefix: string;
  readonly name: string | undefined;
  readonly clock: Clock | undefined;
  readonly timeoutMs: number;
  readonly onError: ((error: Error, key: string) => void) | undefined;
  readonly refusalCache: unknown;
  readonly batch: boolean;
}

/** How `toJSON` shows a limiter's rule: the `Rule`, or `'per key'` when a function chooses it. */
export type RuleSummary<R> = R extends Rule ? Rule : 'per key';

/** The flight of a call sent alone, which holds no other call back. */
const ALONE = new InFlight();

/**
 * One call on its way: built by the layer, answered once by the engine, the outage policy, the
 * call's timeout, or a failed rule lookup. While its key's rule is being looked up, `rule` is
 * UNKNOWN.
 */
class Call implements StoreCall {
  readonly op: Operation;
  readonly key: string;
  /**
   * Under a rule function, the key with its rule (storeNamespace): the refusal cache files the call
   * under it, so a refusal under one rule never answers for the key under another. Empty under a
   * fixed rule, where the key alone does.
   */
  ruledKey = '';
  rule: Rule = UNKNOWN;
  readonly amount: number;
  readonly concurrency: InFlightLimit | undefined;
  readonly now: number | undefined;
  /** The local time the refusal cache dates its entries by (the clock's, or the system's). */
  readonly reading: number;
  /** A refund's receipt going out; a granted reservation's coming back. */
  receipt: unknown;
  /** A refused reservation's wait that no release can end sooner (see StoreCall.answer); 0 unless the store proved one. */
  provenMs = 0;
  readonly deadline: number;
  answered = false;
  /** Handed to the engine (batched or sent): from then on its timeout is the store's. */
  dispatched = false;
  /** A reservation that is part of an admission's joint call: joins it, at `index`, instead of going alone. */
  gathering: Gathering | undefined = undefined;
  index = 0;
  sent: unknown = undefined;
  order = 0;
  /** What the caller is given, settled by {@link resolve} or {@link reject}. */
  readonly promise: Promise<unknown>;
  resolve!: (value: unknown) => void;
  reject!: (error: unknown) => void;
  readonly #owner: Answers;

  constructor(
    owner: Answers,
    op: Operation,
    key: string,
    amount: number,
    concurrency: InFlightLimit | undefined,
    now: number | undefined,
    reading: number,
    receipt: unknown,
    deadline: number,
  ) {
    this.#owner = owner;
    this.op = op;
    this.key = key;
    this.amount = amount;
    this.concurrency = concurrency;
    this.now = now;
    this.reading = reading;
    this.receipt = receipt;
    this.deadline = deadline;
    // A closure over the call alone: an executor in the layer's #call closed over all its
    // arguments, a context of them built per call (bench/HISTORY.md).
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  answer(decision: Decision | undefined, receipt?: unknown, provenMs?: number, rule?: Rule): void {
    if (this.answered) return;
    this.answered = true;
    if (provenMs !== undefined) this.provenMs = provenMs;
    this.#owner.answered(this, decision, receipt, rule);
  }

  fail(error: unknown): void {
    if (this.answered) return;
    this.answered = true;
    this.#owner.failed(this, error);
  }
}

/** How the layer answers its calls (see Call). */
interface Answers {
  answered(call: Call, decision: Decision | undefined, receipt: unknown, rule: Rule | undefined): void;
  failed(call: Call, error: unknown): void;
}

/** The rule of a call whose lookup is still under way (compared by identity, never sent). */
const UNKNOWN = new Rule(1, 1);

/**
 * The public methods every shared store answers, written once over a {@link StoreEngine}:
 * checking keys, permits and rules, looking up a key's rule, the outage policy, the bound on each
 * call, batching, the refusal cache, waiting and reservations. `RedisRateLimiter` and
 * `PostgresRateLimiter` are this class over their engines.
 */
export abstract class StoreRateLimiter<R extends Rule | RuleOf = Rule> extends Closable implements AsyncRateLimiter, JointlyAdmitting {
  /**
   * The rule every key is limited by, as given (checked and copied): a `Rule`, or the function
   * that chooses each key's rule.
   */
  readonly rule: R;
  readonly #fixed: Rule | undefined;
  readonly #lookup: RuleOf | undefined;
  readonly #engine: StoreEngine;
  readonly #algorithm: string;
  /** The in-flight limit every call carries, checked; undefined for a rate alone. */
  readonly #inFlight: InFlightLimit | undefined;
  /** The `concurrency` option as given. */
  readonly #concurrency: Concurrency | undefined;
  readonly #prefix: string;
  readonly #name: string | undefined;
  readonly #timeoutMs: number;
  readonly #clock: Clock | undefined;
  readonly #onError: ((error: Error, key: string) => void) | undefined;
  readonly #refusals: RefusalCache | undefined;
  readonly #policy: Outage;
  readonly #peekPolicy: Outage;
  readonly #timeouts: CallTimeouts<Call>;
  /** Undefined when batching is off and each call goes alone. */
  readonly #coalescer: Coalescer<Call> | undefined;
  readonly #waiting: WaitQueue;
  /** A rule function's answer, checked as `new Rule` checks, shared per distinct rule. */
  readonly #checkRule = sharedPerRule((rule) => rule);
  readonly #namespace: (rule: Rule) => string;
  /**
   * Keys whose rule lookup is under way, with their calls in the order made: a call goes only once
   * every call made before it on its key has gone (or been answered), so a slow lookup never lets
   * a later call on its key overtake it. Empty while every lookup answers at once.
   */
  readonly #looking = new Map<string, Call[]>();
  readonly #answers: Answers = {
    answered: (call, decision, receipt, rule) => this.#answered(call, decision, receipt, rule),
    failed: (call, error) => this.#failed(call, error),
  };

  /** @throws TypeError or RangeError naming the option, before anything is sent to the store. */
  protected constructor(options: StoreLimiterOptions<R>, engine: StoreEngine) {
    super();
    const { algorithm, rule, concurrency, onStoreError, prefix, name, clock, timeoutMs, onError, refusalCache, batch } = options;
    this.#inFlight = checkConcurrency(concurrency);
    this.#concurrency = concurrency;
    if (this.#inFlight !== undefined && algorithm === undefined && rule === undefined) {
      // An in-flight limit alone: the key records its limit and lease length where a rule would be.
      this.#fixed = new Rule(this.#inFlight.limit, this.#inFlight.leaseMs);
      this.rule = this.#fixed as R;
    } else if (typeof rule === 'function') {
      this.#lookup = rule as RuleOf;
      this.rule = rule;
    } else {
      this.#fixed = toRule(rule);
      this.rule = this.#fixed as R;
    }
    checkStoreOptions(clock, timeoutMs, onError);
    this.#engine = engine;
    this.#algorithm = algorithm ?? 'concurrency';
    this.#prefix = prefix;
    this.#name = name;
    this.#timeoutMs = timeoutMs;
    this.#clock = clock;
    this.#onError = onError;
    const context = { timeoutMs, report: this.#report, timeoutError: (ms: number, what: string) => engine.timeoutError(ms, what) };
    this.#policy = outagePolicy(onStoreError, context);
    this.#peekPolicy = peekOutagePolicy(onStoreError, context);
    this.#refusals = refusalCacheFor(refusalCache);
    this.#namespace = sharedPerRule((rule) => storeNamespace(prefix, name, this.#algorithm, rule));
    this.#timeouts = new CallTimeouts(timeoutMs, this.#timedOut, (ms) => engine.timeoutError(ms));
    this.#coalescer = batch ? new Coalescer<Call>(engine.send.bind(engine), engine.maxBatch, engine.ordered) : undefined;
    const attempt = (key: string, permits: number) => this.tryAcquire(key, permits).then(this.#checkOpen);
    this.#waiting = new WaitQueue(attempt, clock === undefined ? systemScheduler : schedulerFor(clock));
  }

  /**
   * The in-flight limit given as the `concurrency` option (at most `limit` permits held at once
   * per key, each lease ending `leaseMs` after its grant), or undefined for a rate alone.
   */
  get concurrency(): Concurrency | undefined {
    return this.#concurrency;
  }

  /**
   * A wait ends when the store can no longer answer: with a client closed for good, a degraded
   * refusal would be tried again for ever, its timer keeping the process alive.
   */
  readonly #checkOpen = (decision: Decision): Decision => {
    if (decision.allowed || decision.degraded === undefined || !this.#engine.clientClosed()) return decision;
    throw new ClosedError(`ratekeeper: the ${this.#engine.store} client is closed, so this wait could never be granted`);
  };

  /**
   * Decides a request for `permits` (default 1) by `key`: one round trip, shared with the calls
   * made while the round ahead was in flight, or none when the refusal cache already knows the
   * answer. Never rejects for a store failure: the outage policy answers instead, marked `degraded`.
   * @throws TypeError when `key` is not a string the store can hold; RangeError when `permits` is
   * not an integer from 1 to the key's limit; what a rule function threw, or the TypeError or
   * RangeError of an answer that is no rule (as a rejected promise).
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const limiter = new RedisRateLimiter({ client: new Redis(), algorithm: 'token-bucket', rule: Rule.perSecond(10), onStoreError: 'allow' });
   * const decision = await limiter.tryAcquire('user-42');
   * if (!decision.allowed) console.log(`retry in ${decision.retryAfterMs} ms`);
   * ```
   */
  tryAcquire(key: string, permits = 1): Promise<Decision> {
    let now: number | undefined;
    try {
      if (this.#inFlight !== undefined) throw unreleasable('tryAcquire');
      this.#engine.checkKey(key);
      checkPermits(permits, this.#fixed?.limit ?? MAX_SAFE);
      now = this.#read();
    } catch (error) {
      return Promise.reject(error);
    }
    // Read only when something uses the reading: a caller's clock decides, or the refusal cache
    // dates what it remembers. Otherwise the server's clock alone decides.
    const reading = now ?? (this.#refusals !== undefined ? systemClock.now() : 0);
    if (this.#fixed !== undefined) {
      const known = this.#refusals?.get(key, permits, reading, this.#fixed.limit);
      if (known !== undefined) return Promise.resolve(known);
    }
    return this.#call('decide', key, permits, now, reading) as Promise<Decision>;
  }

  /**
   * What `tryAcquire(key, permits)` would answer now (a block included), spending nothing and
   * storing no key. `permits` 0 answers the state now, for a dashboard: `remaining` is the whole
   * permits available now, `resetAfterMs` the time until the key is as new, and `allowed` is false
   * only while the key is blocked. While the store fails, the outage policy answers as for
   * `tryAcquire` (a fallback limiter is asked its own `peek`).
   * @throws as `tryAcquire` does, `permits` 0 allowed (as a rejected promise).
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
    try {
      if (permits !== 0) this.#checkPermits(permits);
      return this.#operate('peek', key, permits) as Promise<Decision>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Forgets `key`: its counts and any block are gone, and every later decision is a never-seen
   * key's. This process's callers waiting on it in `acquire` are tried again at once. Outstanding
   * reservations of the key give nothing back.
   * @throws TypeError for a bad key; the client's error or the store's timeout error when the
   * store fails: the key may not have been reset (as a rejected promise).
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const failures = new RedisRateLimiter({ client: new Redis(), algorithm: 'sliding-window-log', rule: Rule.perHour(10), onStoreError: 'deny' });
   * await failures.reset('alice'); // she logged in: her failures no longer count
   * ```
   */
  reset(key: string): Promise<void> {
    try {
      return this.#operate('reset', key, 0) as Promise<void>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Counts `permits` that were already used (a failed login, tokens an upstream consumed): never
   * refused, and `permits` may exceed the limit. What fits is spent exactly as `tryAcquire` would;
   * beyond that the key goes into debt, at most one full limit deep (the rest is forgiven), and is
   * refused until the debt is repaid, with exact `retryAfterMs`; the key's expiry covers the debt.
   * A block neither stops a charge nor is lifted by one. Resolves with the key's state after, as
   * `peek(key, 0)` would without a block.
   * @throws TypeError for a bad key; RangeError when `permits` is not a positive safe integer; the
   * client's error or the store's timeout error when the store fails (as a rejected promise).
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
    try {
      if (this.#inFlight !== undefined) throw unreleasable('charge');
      checkCharge(permits);
      return this.#operate('charge', key, permits) as Promise<Decision>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Refuses every request of `key` for `durationMs` from now, spending nothing, as
   * `KeyedRateLimiter.block` does: each refusal's `retryAfterMs` is the longer of the time left and
   * what the algorithm alone would say; a shorter block never shortens a longer one; only `reset`
   * lifts it. The block is kept apart from the key's counts (no charge or refund touches it), and
   * the key's expiry covers it. `durationMs` is a whole number of ms from 0 to 2^42 (about 139
   * years: a block "for ever").
   * @throws TypeError for a bad key; RangeError for a duration out of range (Infinity included);
   * the client's error or the store's timeout error when the store fails (as a rejected promise).
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
    try {
      integerIn('durationMs', durationMs, 0, MAX_BLOCK_MS);
      if (durationMs > 0) return this.#operate('block', key, durationMs) as Promise<void>;
      // A block of 0 ms blocks nothing and stores nothing; the key and clock are checked all the same, as in memory.
      this.#engine.checkKey(key);
      this.#read();
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Grants (or refuses) `permits` (default 1) now, exactly as `tryAcquire`, for a request whose real
   * cost is known only later: settle the reservation once with that cost. What was not used is
   * given back exactly (only what is still counted: never what time already repaid, never in
   * another window, nothing after a reset or after a charge reached the debt bound), what was over
   * is charged. The key keeps what the refund needs, so a reservation settles through any limiter
   * process. While the store fails the outage policy decides, and the reservation has nothing to
   * settle; a `settle` or `cancel` that fails rejects with the error.
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
    return this.#reserve(key, permits, undefined, 0);
  }

  /** `admit` from this limiter's part on, with the parts that can join one atomic call (src/store/joint-admission.ts). */
  [ADMIT_JOINTLY](parts: readonly AdmissionPart[], from: number, held: readonly Held[], onError: AdmitOptions['onError']): Promise<StoreAdmission> | undefined {
    return admitJointly(parts, from, held, onError);
  }

  /**
   * This limiter's part of an admission decided with others in one atomic call, when its engine
   * offers one; undefined for bad input, which its `reserve` then reports.
   */
  [JOINT](key: string, permits: number): JointPart | undefined {
    const joint = this.#engine.joint;
    // An in-flight part's leases go in order (the admission script wraps plain reservations).
    if (joint === undefined || this.#inFlight !== undefined) return undefined;
    let slot: number;
    try {
      this.#checkPermits(permits);
      slot = joint.slot(key);
    } catch {
      return undefined;
    }
    return {
      together: joint.together,
      slot,
      gather: (count) => new Gathering(count, joint),
      reserve: (gathering, index) => this.#reserve(key, permits, gathering as Gathering, index),
    };
  }

  /** `proven` hears a refusal's wait that no release can end sooner (a waiting lease's, see StoreLeaseTurn). */
  #reserve(key: string, permits: number, gathering: Gathering | undefined, index: number, proven?: (ms: number) => void): Promise<AsyncKeyReservation> {
    let reply: Promise<unknown>;
    let call: Call;
    try {
      this.#checkPermits(permits);
      reply = this.#operate('reserve', key, permits, undefined, (made) => {
        call = made;
        made.gathering = gathering;
        made.index = index;
      });
    } catch (error) {
      gathering?.leave();
      return Promise.reject(error);
    }
    if (gathering !== undefined) {
      // Answered before its turn (its rule lookup failed or timed out): the others go without it.
      const left = () => {
        if (!call.dispatched) gathering.leave();
      };
      reply.then(left, left);
    }
    return reply.then((decision) => {
      const { receipt, rule } = call;
      if (!(decision as Decision).allowed || receipt === undefined) {
        proven?.(call.provenMs);
        return new AsyncKeyReservation(decision as Decision, undefined);
      }
      const settle = (actual: number) => this.#settle(key, permits, rule, receipt, actual);
      if (this.#inFlight === undefined) return new AsyncKeyReservation(decision as Decision, settle);
      return new AsyncKeyReservation(decision as Decision, settle, (ms) => this.#operateSafely('extend', key, ms, receipt, rule) as Promise<boolean>);
    });
  }

  /**
   * Waits as `acquire` does, in the same first-in-first-out line per key among this process's
   * callers, then reserves: resolves with the granted `AsyncLease`, to be settled (or cancelled)
   * once the work is done, or past `maxWaitMs` with an ungranted one holding the key's refusal.
   * With `concurrency` it holds in-flight permits from the grant until settled, cancelled, or its
   * lease ends. A release made through this limiter wakes the line at once; one made by another
   * process (or a lease ending) is seen by a re-check at most 100 ms apart: the waiting head tries
   * again after the shorter of its `retryAfterMs` and 100 ms. It waits up to `maxWaitMs`, since a
   * release may come any moment, but is answered at once, ungranted, when the rate or a block
   * proves the wait longer (as `KeyedRateLimiter.lease` is). Without `concurrency` it waits as
   * `acquire` does, then reserves. `signal` rejects the wait with its reason, spending nothing.
   * @throws (rejects) as `reserve` does, a `ClosedError` once closed, `signal.reason` on abort.
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Concurrency, Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * declare function render(page: string): Promise<string>;
   * const limiter = new RedisRateLimiter({
   *   client: new Redis(),
   *   algorithm: 'token-bucket',
   *   rule: Rule.perMinute(100),
   *   concurrency: new Concurrency(2, { leaseMs: 30_000 }), // 100 a minute and 2 at once
   *   onStoreError: 'deny',
   * });
   * const lease = await limiter.lease('user-1', 1, { maxWaitMs: 10_000 });
   * if (lease.decision.allowed) {
   *   try {
   *     await render('/report');
   *   } finally {
   *     await lease.settle(1); // the minute keeps its 1; the in-flight permit is free again
   *   }
   * }
   * ```
   */
  lease(key: string, permits = 1, options?: AcquireOptions): Promise<AsyncLease> {
    try {
      this.#engine.checkKey(key);
      this.#checkPermits(permits);
    } catch (error) {
      return Promise.reject(error);
    }
    const turn = new StoreLeaseTurn((k, n, proven) => this.#reserve(k, n, undefined, 0, proven), this.#checkOpen, this.#inFlight !== undefined, this.#clock ?? systemClock);
    return this.#waiting.acquireWith(key, permits, options, turn);
  }

  /**
   * Waits until `permits` (default 1) are granted to `key`, as `KeyedRateLimiter.acquire` does:
   * first in first out among this process's callers, each head woken by one timer at its exact
   * `retryAfterMs`, no polling. Callers in other processes compete for the same permits without a
   * shared queue. During an outage the policy's answers apply: a `'deny'` refusal waits and tries
   * again, `'allow'` resolves at once. A wait never outlives the store: once the client is closed
   * for good (ioredis `quit()`, node-redis `quit()`/`close()`), a refused waiter rejects with a
   * `ClosedError` instead of trying again.
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis';
   * import { Rule } from 'ratekeeper';
   * import { RedisRateLimiter } from 'ratekeeper/redis';
   * const limiter = new RedisRateLimiter({ client: new Redis(), algorithm: 'leaky-bucket', rule: Rule.perSecond(5), onStoreError: 'deny' });
   * const decision = await limiter.acquire('outbound-api', 1, { maxWaitMs: 2000, signal: AbortSignal.timeout(5000) });
   * if (decision.allowed) console.log('send it');
   * ```
   */
  acquire(key: string, permits = 1, options?: AcquireOptions): Promise<Decision> {
    // Nobody could release what it would hold.
    if (this.#inFlight !== undefined) return Promise.reject(unreleasable('acquire'));
    return this.#waiting.acquire(key, permits, options);
  }

  /**
   * Ends waiting, as `KeyedRateLimiter.close` does: every `acquire` still waiting rejects with a
   * `ClosedError` (code `ERR_RATEKEEPER_CLOSED`), its timer is cleared, and later `acquire` calls
   * reject at once. `tryAcquire` keeps answering. The client is yours and stays open: close it after.
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

  /**
   * A summary for logs and `JSON.stringify`: the algorithm, rule (`'per key'` when a function
   * chooses it), key prefix, name (when given) and timeout; never the client.
   */
  override toJSON(): { algorithm: string; rule: RuleSummary<R>; prefix: string; name?: string; timeoutMs: number; concurrency?: Concurrency } {
    const summary = { algorithm: this.#algorithm, rule: (this.#fixed ?? 'per key') as RuleSummary<R>, prefix: this.#prefix, timeoutMs: this.#timeoutMs };
    const named = this.#name === undefined ? summary : { ...summary, name: this.#name };
    return this.#concurrency === undefined ? named : { ...named, concurrency: this.#concurrency };
  }

  /** Checks a request's permits against the key's limit (a fixed rule's) and the in-flight limit. */
  #checkPermits(permits: number): void {
    checkPermits(permits, this.#fixed?.limit ?? MAX_SAFE);
    if (this.#inFlight !== undefined) checkPermits(permits, this.#inFlight.limit);
  }

  /**
   * Settles a reservation: charges what was over, or gives back what was not used (only what is
   * still counted). Either way the receipt goes with the call: a charge past what was reserved
   * releases it, as in memory, so that it no longer counts toward the key's bound.
   */
  #settle(key: string, reserved: number, rule: Rule, receipt: unknown, actual: number): Promise<Decision> {
    if (actual > reserved) return this.#operateSafely('charge', key, actual - reserved, receipt) as Promise<Decision>;
    return this.#operateSafely('refund', key, reserved - actual, receipt, rule) as Promise<Decision>;
  }

  /** `#operate`, its throw a rejection. */
  #operateSafely(op: Operation, key: string, amount: number, receipt: unknown, rule?: Rule): Promise<unknown> {
    try {
      return this.#operate(op, key, amount, receipt, undefined, rule);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Starts any call but a decision. A reset reads no clock (as in memory: it has no use for the
   * time). A refund or an extension goes under the rule of its reservation, without a lookup: the
   * store acts under the rule the key is counted under now, never changing it (a key moved to
   * another rule meanwhile voided the receipt, and kept the lease).
   * @throws for a bad key or clock reading.
   */
  #operate(op: Operation, key: string, amount: number, receipt?: unknown, made?: (call: Call) => void, rule?: Rule): Promise<unknown> {
    this.#engine.checkKey(key);
    const now = op === 'reset' ? undefined : this.#read();
    return this.#call(op, key, amount, now, now ?? 0, receipt, made, rule);
  }

  #call(op: Operation, key: string, amount: number, now: number | undefined, reading: number, receipt?: unknown, made?: (call: Call) => void, rule?: Rule): Promise<unknown> {
    const call = new Call(this.#answers, op, key, amount, this.#inFlight, now, reading, receipt, this.#timeouts.deadline());
    try {
      made?.(call);
      // Bounded from its start: a rule lookup counts against the call's timeout too.
      this.#timeouts.add(call);
      const fixed = rule ?? this.#fixed;
      if (fixed !== undefined) {
        this.#ruled(call, fixed);
        this.#dispatch(call);
      } else {
        this.#lookUp(call, this.#lookup!);
      }
    } catch (error) {
      // As a throw inside a promise's executor would: the caller's promise rejects.
      call.reject(error);
    }
    return call.promise;
  }

  /** Asks the rule function for the call's key; the call goes once it and every earlier call on its key have their rule. */
  #lookUp(call: Call, lookup: RuleOf): void {
    const queue = this.#looking.get(call.key);
    let answer: Rule | Promise<Rule>;
    let pending: boolean;
    try {
      answer = lookup(call.key);
      pending = isThenable(answer);
    } catch (error) {
      return this.#refuse(call, error);
    }
    if (!pending) {
      if (!this.#check(call, answer)) return;
      if (queue === undefined) this.#dispatch(call);
      else queue.push(call);
      return;
    }
    if (queue === undefined) this.#looking.set(call.key, [call]);
    else queue.push(call);
    Promise.resolve(answer).then(
      (rule) => {
        if (!call.answered) this.#check(call, rule);
        this.#next(call.key);
      },
      (error: unknown) => {
        this.#refuse(call, error);
        this.#next(call.key);
      },
    );
  }

  /** Sends the calls of `key` whose turn has come: those at the front with their rule (or their answer). */
  #next(key: string): void {
    const queue = this.#looking.get(key);
    if (queue === undefined) return;
    let i = 0;
    for (; i < queue.length; i++) {
      const call = queue[i]!;
      if (call.answered) continue;
      if (call.rule === UNKNOWN) break;
      this.#dispatch(call);
    }
    if (i === queue.length) this.#looking.delete(key);
    else queue.splice(0, i);
  }

  /**
   * Takes a rule function's answer for `call`, checked as `new Rule` checks, with the call's
   * permits checked against it; false (the call rejected, nothing sent) when either is bad.
   */
  #check(call: Call, answer: unknown): boolean {
    let rule: Rule;
    try {
      rule = this.#checkRule(answer as Rule);
      const { op, amount } = call;
      if (op === 'decide' || op === 'reserve' || (op === 'peek' && amount !== 0)) checkPermits(amount, rule.limit);
    } catch (error) {
      this.#refuse(call, error);
      return false;
    }
    this.#ruled(call, rule);
    return true;
  }

  #ruled(call: Call, rule: Rule): void {
    call.rule = rule;
    if (this.#fixed === undefined) call.ruledKey = this.#namespace(rule) + call.key;
  }

  /** Rejects a call whose rule lookup failed: the caller's error, not the store's (no outage policy, no `onError`). */
  #refuse(call: Call, error: unknown): void {
    if (call.answered) return;
    call.answered = true;
    call.reject(error);
  }

  /** Hands a call whose rule is known to the engine, batched or alone. */
  #dispatch(call: Call): void {
    if (call.op === 'decide' && this.#fixed === undefined && this.#refusals !== undefined) {
      const known = this.#refusals.get(call.ruledKey, call.amount, call.reading, call.rule.limit);
      if (known !== undefined) return call.answer(known);
    }
    call.dispatched = true;
    if (call.gathering !== undefined) return call.gathering.join(call.index, call, this.#engine.joint!.prepare(call));
    if (this.#coalescer === undefined || (call.op !== 'decide' && !this.#engine.batchesOperations)) return this.#engine.send([call], ALONE);
    const group = this.#engine.group(call.key);
    // A batch carries one rule, sent once with it.
    this.#coalescer.add(call, this.#fixed !== undefined ? group : `${group} ${call.rule.limit}/${call.rule.windowMs}`);
  }

  #answered(call: Call, decision: Decision | undefined, receipt: unknown, rule: Rule | undefined): void {
    // A refund acted under the key's own rule: its window, and the refusals it may have made stale, are that rule's.
    if (rule !== undefined) this.#ruled(call, rule);
    const { op } = call;
    if (decision !== undefined && this.#fixed === undefined) noteWindow(decision, call.rule.windowMs);
    if (op === 'decide') {
      if (!decision!.allowed) this.#refusals?.remember(this.#refusalKey(call), call.amount, call.reading, decision!);
    } else if (op === 'reserve') {
      call.receipt = receipt;
    } else if (op === 'extend') {
      return call.resolve(receipt === true);
    } else if (op === 'reset' || (op === 'refund' && call.amount > 0) || (this.#inFlight !== undefined && call.receipt !== undefined)) {
      // A settle of a lease released its in-flight permits, whatever it refunded.
      this.#madeRoom(call);
    }
    call.resolve(decision);
  }

  /** A decision, peek or reservation the store failed is answered by the outage policy (reported to `onError`); any other call rejects. */
  #failed(call: Call, error: unknown): void {
    const { op, key, amount } = call;
    if (op !== 'decide' && op !== 'peek' && op !== 'reserve') return call.reject(error);
    call.receipt = undefined;
    this.#report(error, key);
    // A lookup that did not answer left no rule: the policy answers as for a rule of these permits
    // per timeoutMs (see docs/stores.md, "Rules per key").
    const rule = call.rule !== UNKNOWN ? call.rule : new Rule(Math.max(1, amount), this.#timeoutMs);
    try {
      call.resolve((op === 'peek' ? this.#peekPolicy : this.#policy)(error, key, amount, rule));
    } catch (fallbackError) {
      // A fallback limiter that throws (say, for more permits than its own limit) fails this call alone.
      call.reject(fallbackError);
    }
  }

  /** A call's bound passed: answered as the store failing in time; a call still waiting for its rule lets its key's later calls go. */
  readonly #timedOut = (call: Call, error: Error): void => {
    if (!call.dispatched) error = this.#engine.timeoutError(this.#timeoutMs, 'the rule function');
    this.#failed(call, error);
    if (call.dispatched) this.#engine.timedOut(call);
    else this.#next(call.key);
  };

  /** A reset or refund may have made room: a refusal remembered is stale, and waiters may go. */
  #madeRoom(call: Call): void {
    this.#refusals?.forget(this.#refusalKey(call));
    this.#waiting.wake(call.key);
  }

  /** What the refusal cache files a call under (see Call's `ruledKey`). */
  #refusalKey(call: Call): string {
    return this.#fixed === undefined ? call.ruledKey : call.key;
  }

  readonly #report = (error: unknown, key: string): void => report(this.#onError, error, key, this.#engine.store);

  /** The caller's clock reading, checked (NaN sent to a store would come back as a NaN time), or undefined for the store's. */
  #read(): number | undefined {
    const now = this.#clock?.now();
    if (now !== undefined && !Number.isFinite(now)) throw rangeError(`ratekeeper: \`clock\` returned ${describe(now)}, not a finite number`);
    return now;
  }
}

/** How long a waiting lease goes at most before trying again: a release by another process is seen within it. */
const RECHECK_MS = 100;

/**
 * A waiting lease's turn over a store: each try reserves, and the caller gets the reservation that
 * was granted, or an ungranted one holding the final refusal. With an in-flight limit its refusals
 * may end at any moment (another process releases), which nothing here hears: the head tries again
 * after at most {@link RECHECK_MS}. Its `retryAfterMs` is only an upper bound, so it waits until its
 * `maxWaitMs` unless the store proved a longer wait (its rate's retry, its block): then it is
 * answered at once, as `KeyedRateLimiter.lease` is.
 */
class StoreLeaseTurn implements Turn<AsyncLease> {
  readonly #reserve: (key: string, permits: number, proven: (ms: number) => void) => Promise<AsyncKeyReservation>;
  readonly #checkOpen: (decision: Decision) => Decision;
  readonly #clock: Clock;
  readonly least: ((key: string, permits: number) => number) | undefined;
  #reservation: AsyncKeyReservation | undefined;
  /** The decision handed to the line (its retry shortened to the re-check) for the reservation's own. */
  #handed: Decision | undefined;
  /** The wait the last refusal proved, and the reading just before it was asked for. */
  #proven = 0;
  #asked = 0;
  readonly #heard = (ms: number): void => {
    this.#proven = ms;
  };

  constructor(
    reserve: (key: string, permits: number, proven: (ms: number) => void) => Promise<AsyncKeyReservation>,
    checkOpen: (decision: Decision) => Decision,
    holding: boolean,
    clock: Clock,
  ) {
    this.#reserve = reserve;
    this.#checkOpen = checkOpen;
    this.#clock = clock;
    // Less the time the answer took to come back: the store proved it at its own reading (a clock
    // gone back meanwhile lengthens nothing).
    this.least = holding ? () => Math.max(0, this.#proven - Math.max(0, this.#clock.now() - this.#asked)) : undefined;
  }

  attempt(key: string, permits: number): Promise<Decision> {
    this.#proven = 0;
    this.#asked = this.#clock.now();
    return this.#reserve(key, permits, this.#heard).then((reservation) => {
      this.#reservation = reservation;
      const decision = this.#checkOpen(reservation.decision);
      this.#handed = this.least === undefined || decision.allowed || decision.retryAfterMs <= RECHECK_MS ? decision : { ...decision, retryAfterMs: RECHECK_MS };
      return this.#handed;
    });
  }

  answer(decision: Decision): AsyncLease {
    const reservation = this.#reservation;
    if (reservation !== undefined && this.#handed === decision) return reservation;
    return new AsyncKeyReservation(decision, undefined);
  }
}
