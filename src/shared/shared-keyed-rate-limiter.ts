import { type Clock, systemClock } from '../core/clock';
import { type Decision, keyTableFull } from '../core/decision';
import type { Rule } from '../core/rule';
import { rangeError, typeError } from '../core/errors';
import { Closable } from '../core/symbols';
import { assertNumber, checkPermits, checkString, describe, finiteNumber, integerIn } from '../core/validate';
import type { AcquireOptions } from '../limiter/acquire-options';
import { type Scheduler, schedulerFor } from '../limiter/scheduler';
import { WaitQueue } from '../limiter/wait-queue';
import { FixedWindowWord } from './fixed-window-word';
import { KeyHash, newSecret } from './hash';
import { NOT_FOUND, SharedKeyTable } from './key-table';
import {
  ALGORITHMS,
  checkRuleFits,
  EPOCH_MARGIN_MS,
  H,
  HEADER_WORDS,
  type Header,
  MAX_KEYS,
  readHeader,
  ringFor,
  type SharedAlgorithm,
  slotsFor,
  wordsFor,
  writeHeader,
} from './layout';
import { SlidingWindowCounterWord } from './sliding-window-counter-word';
import { SlidingWindowLogRing } from './sliding-window-log-ring';
import type { SharedState } from './state';
import { TokenBucketWord } from './token-bucket-word';

/** Options of {@link SharedKeyedRateLimiter}. */
export interface SharedKeyedRateLimiterOptions {
  /** Which algorithm decides, named as for `RedisRateLimiter`; each decides exactly as its in-memory twin. */
  algorithm: SharedAlgorithm;
  /** How many permits a key may use per window (read by its fields: `limit`, and a whole number of ms `windowMs`). */
  rule: Rule;
  /**
   * The most keys stored at once: the buffer is sized for them (16 bytes per slot, 2.5 slots or
   * more per key; a sliding log adds 8 bytes per slot and permit of its limit). A new key that finds
   * no room is refused with `degraded: 'key-table-full'`; only idle keys are ever replaced.
   */
  maxKeys: number;
  /**
   * Where this thread reads time; read once per call, floored to whole ms. Every thread sharing a
   * buffer should read the same time: `systemClock` agrees across worker threads and Web Workers to
   * well under a millisecond. When it also sets timers (a `Scheduler`), `acquire` waits on them.
   * @default systemClock
   */
  clock?: Clock | Scheduler | undefined;
}

/** Options of {@link SharedKeyedRateLimiter.attach}: the clock, and what the attaching thread expects the buffer to hold. */
export interface SharedAttachOptions {
  /** Where this thread reads time. @default systemClock */
  clock?: Clock | Scheduler | undefined;
  /** Refuse the buffer unless it runs this algorithm. @default undefined (any) */
  algorithm?: SharedAlgorithm | undefined;
  /** Refuse the buffer unless its rule has this `limit` and `windowMs`. @default undefined (any) */
  rule?: Rule | undefined;
}

/** Calls retried when the key's slot was given away mid-decision, before answering as if the table were full. */
const ATTEMPTS = 4;

/**
 * One rate limit per key, shared by every thread (worker_threads, Web Workers) that attaches to the
 * same `SharedArrayBuffer`: two threads asking for the last permit never both get it. Decisions are
 * synchronous and lock-free (one compare-and-swap on the key's 64-bit word), exact across threads,
 * and with one thread equal to a `KeyedRateLimiter` of the same algorithm given the same clock
 * readings. A `SharedArrayBuffer` cannot cross processes: for `cluster`, `fork` or several machines,
 * use `RedisRateLimiter` (docs/threads.md).
 *
 * @example
 * ```ts
 * import { Rule } from 'ratekeeper';
 * import { SharedKeyedRateLimiter } from 'ratekeeper/shared';
 * const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(20), maxKeys: 10_000 });
 * // worker.postMessage(limiter.buffer); and in the worker: SharedKeyedRateLimiter.attach(buffer)
 * limiter.tryAcquire('upstream-api').remaining; // 19
 * ```
 */
export class SharedKeyedRateLimiter extends Closable {
  readonly #buffer: SharedArrayBuffer;
  readonly #words: BigUint64Array;
  readonly #header: Header;
  readonly #rule: Rule;
  readonly #table: SharedKeyTable;
  readonly #state: SharedState;
  /** The same algorithm over a private all-zero slot: a key never seen, for peek and the table-full answer. */
  readonly #fresh: SharedState;
  readonly #clock: Clock;
  readonly #exactUntil: number;
  readonly #waiting: WaitQueue;
  readonly #hash: KeyHash;
  /** The last key asked for, its hash, home and slot: a hot key skips hashing and the probe (confirm() still checks the slot). */
  #lastKey: string | undefined;
  #lastHash = 0n;
  #lastLow = 0;
  #lastSlot = NOT_FOUND;
  /** This thread's latest reading, ms since the buffer's epoch. */
  #latest = 0;

  /**
   * Makes a new buffer for `maxKeys` keys under one rule.
   * @throws TypeError for a missing or mistyped option, or where `SharedArrayBuffer` or
   * `crypto.getRandomValues` is unavailable (a browser page without cross-origin isolation); RangeError for a rule the algorithm's word
   * cannot count exactly for ten years, or a `maxKeys` out of range.
   */
  constructor(options: SharedKeyedRateLimiterOptions) {
    super();
    const attached = options instanceof Attached ? options : undefined;
    if (attached === undefined) {
      if (options === null || typeof options !== 'object') {
        throw invalid(`SharedKeyedRateLimiter options must be an object, got ${describe(options)}`);
      }
      if (typeof SharedArrayBuffer === 'undefined') {
        throw invalid('SharedArrayBuffer is not available here (a browser page needs cross-origin isolation: COOP and COEP headers)');
      }
      if (typeof crypto === 'undefined' || typeof crypto.getRandomValues !== 'function') {
        throw invalid('crypto.getRandomValues is not available here (the key table hashes keys under a random secret)');
      }
    }
    const { algorithm, maxKeys } = attached?.header ?? options;
    const clock = checkClock(attached === undefined ? options.clock : attached.clock);
    if (!ALGORITHMS.includes(algorithm)) {
      throw invalid(`\`algorithm\` must be one of ${ALGORITHMS.map((a) => `'${a}'`).join(', ')}, got ${describe(algorithm)}`);
    }
    const { limit, windowMs } = checkRule(attached === undefined ? options.rule : attached.header);
    this.#exactUntil = checkRuleFits(algorithm, limit, windowMs);
    if (attached === undefined) {
      integerIn('maxKeys', maxKeys, 1, MAX_KEYS);
      const slots = slotsFor(maxKeys);
      const ring = ringFor(algorithm, limit);
      const bytes = wordsFor(slots, ring) * 8;
      if (bytes > 2 ** 32) {
        throw rangeError(`ratekeeper: \`maxKeys\` ${maxKeys} would need a buffer of ${bytes} bytes, more than 4 GiB`);
      }
      const epoch = Math.floor(finiteNumber('clock.now()', clock.now())) - EPOCH_MARGIN_MS;
      this.#buffer = new SharedArrayBuffer(bytes);
      this.#words = new BigUint64Array(this.#buffer);
      this.#header = { algorithm, limit, windowMs, maxKeys, slots, ring, epoch, secret: newSecret() };
      writeHeader(this.#words, this.#header);
    } else {
      this.#buffer = attached.buffer;
      this.#words = attached.words;
      this.#header = attached.header;
    }
    this.#rule = Object.freeze({ limit, windowMs }) as Rule;
    this.#hash = new KeyHash(this.#header.secret);
    this.#clock = clock;
    this.#table = new SharedKeyTable(this.#words, this.#header.slots, this.#header.maxKeys);
    this.#state = stateFor(this.#words, this.#header, this.#rule, (slot) => this.#table.stateIndex(slot));
    const scratch = new BigUint64Array(HEADER_WORDS + 2 + this.#header.ring);
    this.#fresh = stateFor(scratch, this.#header, this.#rule, () => HEADER_WORDS + 1);
    this.#waiting = new WaitQueue((key, permits) => this.tryAcquire(key, permits), schedulerFor(clock));
  }

  /**
   * A limiter over a buffer made by `new SharedKeyedRateLimiter` in another thread (or this one):
   * same keys, same state. Pass `algorithm` and `rule` to have a buffer that holds anything else refused.
   * @throws TypeError when `buffer` is not such a buffer, or holds another algorithm or rule than expected.
   *
   * @example
   * ```ts
   * import { Rule } from 'ratekeeper';
   * import { SharedKeyedRateLimiter } from 'ratekeeper/shared';
   * const main = new SharedKeyedRateLimiter({ algorithm: 'fixed-window', rule: Rule.perMinute(60), maxKeys: 1000 });
   * const inWorker = SharedKeyedRateLimiter.attach(main.buffer, { algorithm: 'fixed-window', rule: Rule.perMinute(60) });
   * inWorker.tryAcquire('k').remaining; // 59
   * main.tryAcquire('k').remaining; // 58
   * ```
   */
  static attach(buffer: SharedArrayBuffer, options?: SharedAttachOptions): SharedKeyedRateLimiter {
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw invalid(`attach options must be an object, got ${describe(options)}`);
    }
    const { words, header } = readHeader(buffer);
    const { clock, algorithm, rule } = options ?? {};
    if (algorithm !== undefined && algorithm !== header.algorithm) {
      throw invalid(`the buffer runs '${header.algorithm}', not ${describe(algorithm)} as this thread expects`);
    }
    if (rule !== undefined) {
      const { limit, windowMs } = checkRule(rule);
      if (limit !== header.limit || windowMs !== header.windowMs) {
        throw invalid(`the buffer's rule is Rule(${header.limit}, ${header.windowMs}), not Rule(${limit}, ${windowMs}) as this thread expects`);
      }
    }
    return new SharedKeyedRateLimiter(new Attached(buffer, words, header, clock) as unknown as SharedKeyedRateLimiterOptions);
  }

  /** The `SharedArrayBuffer` holding every key's state: post it to a worker and `attach` it there. */
  get buffer(): SharedArrayBuffer {
    return this.#buffer;
  }

  /** The algorithm the buffer runs. */
  get algorithm(): SharedAlgorithm {
    return this.#header.algorithm;
  }

  /** The buffer's rule (`limit` and `windowMs`). */
  get rule(): Rule {
    return this.#rule;
  }

  /** How many keys are stored, across every thread. */
  get size(): number {
    return this.#table.size;
  }

  /**
   * Decides a request for `permits` (default 1) by `key`, synchronously, exactly across threads.
   * A refusal writes nothing. It keeps answering after `close()`, which ends only waiting.
   * @throws TypeError when `key` is not a string of well-formed UTF-16 (a lone surrogate is refused,
   * as by `KeyedRateLimiter`); RangeError when `permits` is not an integer from 1 to the limit, or
   * the clock reads past the last ms the rule is exact for.
   */
  tryAcquire(key: string, permits = 1): Decision {
    const t = this.#begin(key, permits);
    const h = this.#hashOf(key);
    const low = this.#lastLow;
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      // A slot remembered from the last call may have been given to another key since: decide on it
      // only if it still holds this one (a refusal writes nothing, not even to another key's state).
      const remembered = attempt === 0 ? this.#lastSlot : NOT_FOUND;
      let slot = remembered !== NOT_FOUND && this.#table.holds(remembered, h) ? remembered : this.#table.find(h, low);
      let now = t;
      if (slot === NOT_FOUND) {
        now = this.#latestShared(t);
        slot = this.#table.findOrInsert(h, low, now, (s) => this.#state.isIdle(s, now));
        if (slot === NOT_FOUND) return this.#tableFull(now);
      }
      const decision = this.#state.decide(slot, now, permits, true);
      if (this.#table.confirm(slot, h)) {
        this.#lastSlot = slot;
        return decision;
      }
      this.#lastSlot = NOT_FOUND;
    }
    return this.#tableFull(this.#latestShared(t));
  }

  /**
   * What `tryAcquire(key, permits)` would answer now, spending nothing and storing no key: a new
   * key that would find no room is refused with `'key-table-full'`, as `tryAcquire` would refuse it.
   * @throws as `tryAcquire` does.
   */
  peek(key: string, permits = 1): Decision {
    const t = this.#begin(key, permits);
    const h = this.#hashOf(key);
    const low = this.#lastLow;
    for (;;) {
      const slot = this.#table.find(h, low);
      if (slot === NOT_FOUND) {
        const now = this.#latestShared(t);
        const room = this.#table.hasRoom(low, now, (s) => this.#state.isIdle(s, now));
        return room ? this.#fresh.decide(0, now, permits, false) : this.#tableFull(now);
      }
      const decision = this.#state.decide(slot, t, permits, false);
      if (this.#table.confirm(slot, h)) return decision;
    }
  }

  /**
   * Waits until `permits` (default 1) are granted to `key` and resolves with the `Allowed` decision;
   * resolves with the `Rejected` one if the wait would exceed `maxWaitMs`; rejects with
   * `signal.reason` on abort, and with an `ERR_RATEKEEPER_CLOSED` error once this limiter is closed.
   * Waiting is a timer set for the exact `retryAfterMs`, never a spin: another thread that spends
   * meanwhile only makes the retry refuse again with a new wait. Callers in this thread wait first in
   * first out per key; threads do not queue behind one another.
   *
   * @example
   * ```ts
   * import { Rule } from 'ratekeeper';
   * import { SharedKeyedRateLimiter } from 'ratekeeper/shared';
   * const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(2), maxKeys: 100 });
   * for (let i = 0; i < 3; i++) await limiter.acquire('uploads'); // the third waits 500 ms
   * ```
   */
  acquire(key: string, permits = 1, options?: AcquireOptions): Promise<Decision> {
    return this.#waiting.acquire(key, permits, options);
  }

  /**
   * Ends this thread's waiting: every `acquire` still waiting rejects with a `ClosedError` (code
   * `ERR_RATEKEEPER_CLOSED`) and spends nothing, its timer is cleared, and later `acquire` calls
   * reject the same way at once. `tryAcquire` and `peek` keep answering, as on `KeyedRateLimiter`.
   * The buffer, and every other thread's limiter on it, go on. Calling it again does nothing.
   */
  override close(): void {
    this.#waiting.close();
  }

  /** A summary for logs and `JSON.stringify`: the algorithm, the rule, stored keys and the bound; never the keys themselves. */
  override toJSON(): { algorithm: SharedAlgorithm; limit: number; windowMs: number; size: number; maxKeys: number } {
    const { algorithm, limit, windowMs, maxKeys } = this.#header;
    return { algorithm, limit, windowMs, size: this.size, maxKeys };
  }

  /** Checks a call's arguments and reads the clock: ms since the buffer's creation, maybe below the latest. */
  #begin(key: string, permits: number): number {
    // The last key was checked when it was first asked for: the hot key skips the regular expression.
    if (typeof key !== 'string' || key !== this.#lastKey) checkString('key', key);
    checkPermits(permits, this.#header.limit);
    const reading = this.#clock.now();
    if (typeof reading !== 'number') assertNumber('nowMs', reading);
    if (!Number.isFinite(reading)) finiteNumber('nowMs', reading);
    // An earlier reading than this thread's latest counts as no time passing, as in memory.
    const t = Math.floor(reading) - this.#header.epoch;
    if (t <= this.#latest) return this.#latest;
    if (t > this.#exactUntil) {
      throw rangeError(`ratekeeper: the shared ${this.#header.algorithm} word is exact for ${this.#exactUntil} ms after its creation; the clock reads ${t}`);
    }
    this.#latest = t;
    return t;
  }

  /**
   * The time a new key is decided at: this thread's reading, or the latest reading at which any
   * thread has given a slot away, if that is later; raised to the reading first. A thread gives an
   * idle key's slot away only after raising it (on this same path), and this is read after the
   * lookup that missed the key, so a key forgotten as idle at some reading is never decided afresh
   * at an earlier one, whatever the threads' clocks say.
   */
  #latestShared(t: number): number {
    const words = this.#words;
    let seen = Atomics.load(words, H.latest);
    if (t <= Number(seen)) {
      this.#latest = Number(seen);
      return this.#latest;
    }
    const target = BigInt(t);
    while (seen < target) {
      const before = Atomics.compareExchange(words, H.latest, seen, target);
      if (before === seen) break;
      seen = before;
    }
    return t;
  }

  #hashOf(key: string): bigint {
    if (key !== this.#lastKey) {
      this.#lastHash = this.#hash.hash(key);
      this.#lastLow = this.#hash.low;
      this.#lastKey = key;
      this.#lastSlot = NOT_FOUND;
    }
    return this.#lastHash;
  }

  /** The refusal of a new key that found no room: retry once a key that used the whole limit now would be as new. */
  #tableFull(now: number): Decision {
    const { limit } = this.#header;
    return keyTableFull(limit, this.#fresh.decide(0, now, limit, false).resetAfterMs);
  }
}

/** What `attach` hands the constructor. */
class Attached {
  constructor(
    readonly buffer: SharedArrayBuffer,
    readonly words: BigUint64Array,
    readonly header: Header,
    readonly clock: Clock | undefined,
  ) {}
}

function stateFor(words: BigUint64Array, header: Header, rule: Rule, state: (slot: number) => number): SharedState {
  switch (header.algorithm) {
    case 'token-bucket':
    case 'leaky-bucket':
      return new TokenBucketWord(words, state, rule);
    case 'fixed-window':
      return new FixedWindowWord(words, state, rule, header.epoch);
    case 'sliding-window-counter':
      return new SlidingWindowCounterWord(words, state, rule, header.epoch);
    case 'sliding-window-log': {
      const entries = HEADER_WORDS + 2 * (words.length - HEADER_WORDS) / (2 + header.ring);
      return new SlidingWindowLogRing(words, state, (slot) => entries + slot * header.ring, rule, header.ring);
    }
  }
}

/** A rule read by its fields (PLAN decision 2: never `instanceof`, so two copies of ratekeeper agree). */
function checkRule(rule: unknown): { limit: number; windowMs: number } {
  const r = rule as Partial<Rule> | null;
  if (r === null || typeof r !== 'object' || typeof r.limit !== 'number' || typeof r.windowMs !== 'number') {
    throw invalid(`\`rule\` must be a Rule, e.g. Rule.perSecond(10), got ${describe(rule)}`);
  }
  return { limit: integerIn('rule.limit', r.limit, 1, Number.MAX_SAFE_INTEGER), windowMs: r.windowMs };
}

function checkClock(clock: unknown): Clock {
  if (clock === undefined) return systemClock;
  const c = clock as Partial<Clock> | null;
  if (c === null || typeof c !== 'object' || typeof c.now !== 'function') {
    throw invalid(`\`clock\` must be an object with a now() method, got ${describe(clock)}`);
  }
  return clock as Clock;
}

function invalid(message: string): TypeError {
  return typeError(`ratekeeper: ${message}`);
}
