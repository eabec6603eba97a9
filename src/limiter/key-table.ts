import type { AccountingAlgorithm, PeekableAlgorithm, RateLimitAlgorithm } from '../algorithms/algorithm';
import { holds, partsOf } from '../algorithms/composite';
import { type Decision, keyTableFull } from '../core/decision';
import { typeError } from '../core/errors';
import { describe } from '../core/validate';
import { carryOver } from './carry-over';
import { IdleHeap } from './idle-heap';
import { ShardedMap, shardSeed } from './sharded-map';

type Factory = (key: string) => RateLimitAlgorithm;

/** What keeps keys from being reclaimed (see `KeyPins`): whether one is pinned, and until when at the earliest. */
interface Pins {
  has(key: string, now: number): boolean;
  until(key: string, now: number): number | undefined;
}

/**
 * Entries examined each time a new key is stored, until the table is first full. Two is the fewest
 * that keep a table within twice its active keys (the README's claim, tested in
 * test/limiter/flood.test.ts): with one, a table under new keys arriving steadily kept growing
 * (bench/HISTORY.md).
 *
 * A full table no longer relies on the sweep to admit newcomers (it admitted fewer of a flood's
 * newcomers than could fit): the idle heap finds an idle key whenever one is resident, and admits
 * exactly those that fit.
 */
const SWEEP_PER_NEW_KEY = 2;

/**
 * The resident keys of a keyed limiter, reclaimed a few at a time as new keys arrive (once full, in
 * the order they go idle), and carried over to a new rule a few at a time after a reconfiguration.
 *
 * A reconfiguration does not touch any state: it sets the current map aside as `previous`. A key
 * found there is carried over to the new factory's state on its first use, and the sweep carries
 * over (or drops, when idle) a few more each time a new key arrives. Every carry-over is measured at
 * the moment of the switch, so the result is the same as converting every key at once.
 */
export class KeyTable {
  /** Keys under the current factory: the only map a resident key's decision reads. */
  #current: ShardedMap<RateLimitAlgorithm>;
  /** Keys from before the last reconfiguration, not yet carried over. */
  #previous: ShardedMap<RateLimitAlgorithm>;
  #factory: Factory;
  /** When the last reconfiguration happened. */
  #switchedAt = 0;
  readonly #maxKeys: number;
  /**
   * Keys someone waits on: kept even when idle, so their line never competes for a slot again. An
   * object rather than a closure: a closure per limiter made the sweep's optimized code deoptimize
   * ("wrong call target") whenever a second limiter swept, and such a call stalled
   * (bench/latency.ts).
   */
  readonly #pinned: Pins;
  /**
   * Once the table has been full (with `maxKeys`), every resident key by the earliest time it could
   * be idle, so that a full table finds an idle key whenever there is one, without a search: a
   * newcomer is refused only when no resident key (not waited on) is idle. Built when the table
   * first fills and kept while it stays full; until then the sweep reclaims, and nothing is spent
   * on it (a heap entry per admission kept reclaimed states alive, and GC took the CPU).
   */
  #idle: IdleHeap | undefined;
  /**
   * For the keys remembered again after a change that can make them idle sooner (see `changed`):
   * the time of the one entry that stands for the key. Its other entries are dropped when they come
   * up, so however often a key is refunded it keeps at most that entry and the one it had.
   */
  #latest = new WeakMap<RateLimitAlgorithm, number>();
  /** The last delay before looking again at a state without `peek` (see `#idleAt`). */
  readonly #delays = new WeakMap<RateLimitAlgorithm, number>();
  /**
   * The last key found in `#current`, and its state: a hot key skips the map lookup, a visible part
   * of its decision's cost (bench/HISTORY.md). Every removal from
   * `#current` forgets it (`#removed`, `reconfigure`), so it never outlives its entry.
   */
  #lastKey: string | undefined;
  #lastState: RateLimitAlgorithm | undefined;
  /** The seed of every map of this table, drawn once: one per limiter (see `shardOf`). */
  readonly #seed = shardSeed();

  constructor(factory: Factory, maxKeys: number, pinned: Pins) {
    this.#factory = factory;
    this.#maxKeys = maxKeys;
    this.#pinned = pinned;
    this.#current = new ShardedMap(maxKeys, this.#seed);
    this.#previous = new ShardedMap(maxKeys, this.#seed);
  }

  get size(): number {
    return this.#current.size + this.#previous.size;
  }

  /** The state of a key under the current factory, if resident. */
  get(key: string): RateLimitAlgorithm | undefined {
    if (key === this.#lastKey) return this.#lastState;
    const state = this.#current.get(key);
    if (state !== undefined) {
      this.#lastKey = key;
      this.#lastState = state;
    }
    return state;
  }

  /** The state of a key resident from before the last reconfiguration, carried over now. */
  carried(key: string): RateLimitAlgorithm | undefined {
    const old = this.#previous.size === 0 ? undefined : this.#previous.get(key);
    return old === undefined ? undefined : this.#carry(key, old);
  }

  /** A fresh state for a key, not stored. */
  create(key: string): RateLimitAlgorithm {
    return this.#factory(key);
  }

  /**
   * Makes room for a new key: true when the table has room, after reclaiming a few idle keys (once
   * full, the idle key that went idle first); false when it is full and no key in it is idle.
   */
  room(now: number): boolean {
    // While the heap is kept, it reclaims: a sweep would leave entries behind for keys it removed.
    if (this.#idle === undefined) this.#sweep(now, SWEEP_PER_NEW_KEY);
    return this.size < this.#maxKeys || this.#idleKey(now, true);
  }

  /**
   * Whether `room` would find room now, changing nothing any decision depends on: `peek` answers
   * what `tryAcquire` would, so a new key that `tryAcquire` would refuse is refused by `peek` too.
   */
  hasRoom(now: number): boolean {
    return this.size < this.#maxKeys || this.#idleKey(now, false);
  }

  /** Stores a new key's state, granted at `now` with `resetAfterMs` until it is as new; after `room`. */
  store(key: string, state: RateLimitAlgorithm, now: number, resetAfterMs: number): void {
    this.#current.set(key, state);
    // A custom algorithm's reset is taken as it comes, but never as earlier than now, nor NaN.
    const at = now + resetAfterMs;
    this.#remember(at > now ? at : now, key, state, true);
  }

  /**
   * Finds an idle key, if any is resident, taking keys in the order they could go idle, and removes
   * it when `remove` is set (else leaves its entry first in line). Each entry that comes up too early
   * (its key was used since) is pushed again at the key's true idle time, so it comes up again only
   * after another grant: the work is a few heap steps per grant.
   */
  #idleKey(now: number, remove: boolean): boolean {
    const idle = (this.#idle ??= this.#idleHeap(now));
    for (;;) {
      if (!idle.hasDue(now)) {
        // A key from before the last switch is remembered by its old state, which may go idle later
        // than the state it is carried to (a shorter window): carry such keys over, each remembered
        // from the switch on and so looked at next, until one is idle or none is left.
        const old = this.#previous.size === 0 ? undefined : this.#previous.nextEntry();
        if (old === undefined) return false;
        this.#carry(...old);
        continue;
      }
      const { at, key, state } = idle.pop();
      // Most entries that come up are of idle keys: judged first, each costs one lookup of its key.
      if (this.#forgettable(key, state, now)) {
        if (this.#current.get(key) === state) {
          if (!remove) this.#look(now, key, state);
          else if (this.#current.deleteIf(key, state)) this.#removed(key);
          return true;
        }
      } else if (this.#current.get(key) === state) {
        const latest = this.#latest.get(state);
        if (latest === undefined || latest === at) this.#again(key, state, now);
        continue;
      }
      if (this.#previous.size > 0 && this.#previous.get(key) === state) {
        if (this.#forgettable(key, state, this.#switchedAt)) {
          if (remove) this.#previous.delete(key);
          else idle.push(this.#switchedAt, key, state);
          return true;
        }
        this.#carry(key, state); // remembered again under its new state, from the switch on
      }
      // Otherwise the key left the table, or its state was replaced: the entry is dropped.
    }
  }

  /** Every resident key by the earliest time it could be idle: one pass, when the table first fills. */
  #idleHeap(now: number): IdleHeap {
    const idle = new IdleHeap();
    this.#latest = new WeakMap();
    for (const [key, state] of this.#previous) idle.push(this.#switchedAt, key, state);
    for (const [key, state] of this.#current) idle.push(state.isIdle(now) ? now : this.#idleAt(state, now), key, state);
    return idle;
  }

  /**
   * When to look at a state again: its idle time, or for a state without `peek` after a delay that
   * doubles at each look, so that the keys of a custom algorithm cost a few looks each, not one per ms.
   */
  #idleAt(state: RateLimitAlgorithm, now: number): number {
    const at = idleAt(state, now);
    if (at !== undefined) return at;
    const delay = 2 * (this.#delays.get(state) ?? 0.5);
    this.#delays.set(state, delay);
    return now + delay;
  }

  /** Adds a key's entry to the idle heap, if kept; a `fresh` key's in its lanes (see `IdleHeap.queue`). */
  #remember(at: number, key: string, state: RateLimitAlgorithm, fresh: boolean): void {
    const idle = this.#idle;
    if (idle === undefined) return;
    if (fresh) idle.queue(at, key, state);
    else idle.push(at, key, state);
    // Entries of keys carried over to a new state are dropped only when they come up; keep them few.
    if (idle.size > 2 * this.#maxKeys + 1024) idle.retain((k, st) => this.#current.get(k) === st || this.#previous.get(k) === st);
  }

  /**
   * Remembers a resident key again after a change that may make it idle sooner than its entry
   * says (a refund, the end of its waiting line; a grant or a charge only moves that moment later),
   * so that a full table finds it idle when it is, however it became so. An entry already as early
   * stands for it.
   */
  changed(key: string, now: number): void {
    if (this.#idle === undefined) return;
    const state = this.#current.get(key);
    if (state === undefined) return;
    const at = state.isIdle(now) ? now : this.#idleAt(state, now);
    const latest = this.#latest.get(state);
    if (latest !== undefined && latest <= at) return;
    this.#latest.set(state, at);
    this.#remember(at, key, state, false);
  }

  /**
   * Remembers a resident key not forgettable now for when it could be: its idle time, or its block's
   * end if later. A key someone waits on is remembered again only when its line ends (`changed`):
   * pushed again each ms, blocked idle keys stalled every newcomer (bench/HISTORY.md).
   */
  #again(key: string, state: RateLimitAlgorithm, now: number): void {
    const pinned = this.#pinned.until(key, now);
    if (pinned === Infinity) {
      this.#latest.delete(state);
      return;
    }
    const at = this.#idleAt(state, now);
    this.#look(pinned !== undefined && pinned > at ? pinned : at, key, state);
  }

  /** Pushes a resident key's entry again at `at`, the one that stands for it if it was remembered again. */
  #look(at: number, key: string, state: RateLimitAlgorithm): void {
    if (this.#latest.has(state)) this.#latest.set(state, at);
    (this.#idle as IdleHeap).push(at, key, state);
  }

  /** Forgets a key, resident or from before the last reconfiguration: it is as if never seen. */
  delete(key: string): void {
    this.#current.delete(key);
    this.#previous.delete(key);
    this.#removed(key);
  }

  /** Switches to a new factory at `now`; keys are carried over lazily (see the class comment). */
  reconfigure(factory: Factory, now: number): void {
    // Keys still waiting from an earlier switch are carried over to that switch first, at its time.
    for (const [key, old] of this.#previous) this.#carry(key, old);
    this.#previous = this.#current;
    this.#current = new ShardedMap(this.#maxKeys, this.#seed);
    this.#lastKey = this.#lastState = undefined; // every key left `#current`
    this.#factory = factory;
    this.#switchedAt = now;
  }

  /**
   * Removes every idle key not waited on, in one pass; returns how many. Keys from before the last
   * switch are carried over first (those idle at the switch dropped), so a key that went idle
   * after the switch is judged now under its new state, as a key that arrived after it is.
   */
  evictIdle(now: number): number {
    let removed = 0;
    for (const [key, old] of this.#previous) {
      if (this.#forgettable(key, old, this.#switchedAt)) {
        this.#previous.delete(key);
        removed++;
      } else {
        this.#carry(key, old);
      }
    }
    for (const [key, state] of this.#current) {
      if (this.#forgettable(key, state, now)) {
        this.#current.delete(key);
        this.#removed(key);
        removed++;
      }
    }
    // The table is no longer full: the sweep takes over until it fills again.
    if (removed > 0) this.#idle = undefined;
    return removed;
  }

  /**
   * Whether a key can be forgotten: idle at `at` and not waited on. A key from before the last switch
   * is judged at the switch, where its carry-over is measured: idle only since, it may still carry
   * spent permits over to a rule with a longer window.
   */
  #forgettable(key: string, state: RateLimitAlgorithm, at: number): boolean {
    return state.isIdle(at) && !this.#pinned.has(key, at);
  }

  /** Called whenever `key` leaves `#current`: the last key found must not outlive its entry. */
  #removed(key: string): void {
    if (key === this.#lastKey) this.#lastKey = this.#lastState = undefined;
  }

  #carry(key: string, old: RateLimitAlgorithm): RateLimitAlgorithm {
    const fresh = this.#factory(key);
    const state = carryOver(old, fresh, this.#switchedAt) ? fresh : old;
    this.#previous.delete(key);
    this.#current.set(key, state);
    // The carried state may be idle from the switch on: a lower bound for any state made then.
    this.#remember(this.#switchedAt, key, state, false);
    return state;
  }

  /**
   * Examines up to `budget` entries, each map resuming where its last sweep stopped: keys from before
   * a reconfiguration first (dropping those idle at the switch, carrying the rest over), then the
   * current ones (dropping the idle ones).
   */
  #sweep(now: number, budget: number): void {
    for (let i = 0; i < budget && this.size > 0; i++) {
      const old = this.#previous.nextEntry();
      if (old !== undefined) {
        const [key, state] = old;
        if (this.#forgettable(key, state, this.#switchedAt)) this.#previous.delete(key);
        else this.#carry(key, state);
        continue;
      }
      const entry = this.#current.nextEntry();
      if (entry === undefined) return;
      const [key, state] = entry;
      if (this.#forgettable(key, state, now)) {
        this.#current.delete(key);
        this.#removed(key);
      }
    }
  }
}

/**
 * The earliest time after `now` at which a state not forgettable now (active, or waited on) could be:
 * its reset time, read without spending from a refusal, which reports the key's state as it is.
 * Undefined when it cannot be read so (no `peek`, or one that refuses nothing: the state is idle, or
 * blocked rather than spent).
 */
function idleAt(state: RateLimitAlgorithm, now: number): number | undefined {
  const next = now + 1;
  const s = state as Partial<PeekableAlgorithm>;
  if (typeof s.peek !== 'function') return undefined;
  // A composite is idle when every part is: the latest of its parts' times. Probed whole, a request
  // for one more than its binding part has would pass its smallest part's limit and tell nothing,
  // and every such key would be looked at again each ms while a full table refuses newcomers.
  const parts = partsOf(s as PeekableAlgorithm);
  if (parts !== undefined) {
    let latest = next;
    for (const part of parts) latest = Math.max(latest, idleAt(part, now) ?? next);
    return latest;
  }
  try {
    const probe = s.peek(now, 1);
    const available = probe.allowed ? probe.remaining + 1 : probe.remaining;
    // A request for one more than is available is refused, so it tells the reset as things stand.
    const refusal = probe.allowed ? (available < probe.limit ? s.peek(now, available + 1) : probe) : probe;
    // Refused nothing though not idle (a custom algorithm whose peek and isIdle disagree): no time to tell.
    if (refusal.allowed) return undefined;
    return Math.max(next, now + refusal.resetAfterMs);
  } catch {
    return next; // a custom algorithm whose peek throws
  }
}

/** Throws a `TypeError` naming `algorithm` unless it is a function. */
export function checkFactory(algorithm: unknown): void {
  if (typeof algorithm !== 'function') {
    throw typeError(`ratekeeper: \`algorithm\` must be a function returning a fresh algorithm, got ${describe(algorithm)}`);
  }
}

/**
 * Refuses a new key because every resident key is active. The retry hint is how long a key
 * emptied now stays active: an upper bound on when a resident key that goes quiet frees its slot.
 * `fresh` is the key's state, not stored, which has spent `spent` permits at `now` (its `decision`
 * told the limit); it is spent down to empty here.
 */
export function tableFull(fresh: RateLimitAlgorithm, decision: Decision, spent: number, now: number): Decision {
  const { limit } = decision;
  // An in-flight limit is spent by reserving (its tryAcquire throws); the state is thrown away after.
  let emptied = decision;
  if (spent < limit) emptied = holds(fresh) ? (fresh as AccountingAlgorithm).reserve(now, limit - spent).decision : fresh.tryAcquire(now, limit - spent);
  return keyTableFull(limit, emptied.resetAfterMs);
}
