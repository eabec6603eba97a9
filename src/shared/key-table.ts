import { H, HEADER_WORDS } from './layout';

// The shared key table: open addressing over `slots` slots (a power of two), each key looked for in
// the WINDOW slots from its home slot on. It takes no lock: every change is one compare-and-swap of
// one key word, so a thread stopped at any point (worker.terminate()) leaves nothing another thread
// must wait for.
//
// A key word holds one of:
//   0               never used: no key was ever stored at or after it in a probe (slots never go back to 0)
//   h               the key with hash h lives here
//   h | RETIRING    the key h lives here while someone checks whether it is idle, to give its slot away
//   h | PENDING     a thread has claimed the slot for the new key h and not yet made sure it is the only one
//   FREE            nobody: a claim given up, reusable (lookups go on past it)
//
// Two threads racing to create one key end with one slot: each claims a slot (h | PENDING), then
// looks at the whole window again; a claim that sees the key stored elsewhere, or an earlier claim
// in probe order, withdraws, and a claim that sees a later one withdraws that one. Atomics are
// sequentially consistent, so of two claims at least one thread sees the other; withdrawing and
// committing are each a CAS from the same PENDING value, so exactly one of them happens.
//
// A thread stopped mid-call (worker.terminate()) leaves at worst: a claim no one settles, which the
// next thread to look for room in that window settles for it (commits or withdraws it, as its own
// thread would have: a committed claim is an idle key, so its slot can be given away); or a key
// count raised for a slot it never took, or never lowered for one it gave up. The count can only be
// too high then, so it is healed where it would refuse a new key: once it has stood at one value
// for a recount period (RECOUNT_MS, longer for huge tables), the table is counted again and the
// count set to what it holds. A thread paused that long between counting a key and claiming its
// slot lets one key more in: that is the price, paid only after a thread died or stalled that long.
//
// Only an idle key's slot is given away. The giver marks it RETIRING, then reads the state; a
// thread deciding for that key writes the state, then reads the key word, and takes the mark off
// again if it finds it (confirm()). Of the two, at least one sees the other: either the giver sees
// the new spending and leaves the key be, or the decider learns that its key moved and decides
// again (the state it wrote now counts against the newcomer: stricter, never looser).

const PENDING = 1n << 63n;
const RETIRING = 1n << 62n;
const FREE = RETIRING;
/** Slots a key may live in, from its home slot on. */
const WINDOW = 64;
/** Claims a new key makes before its call is answered as if the table were full. */
const ATTEMPTS = 8;
/**
 * How long the key count must stand still, while it refuses a new key, before the table is counted
 * again: a second, or a microsecond per slot for tables past 2^20 slots, so that counting (a few ns
 * a slot, paid by the one call that does it) stays under 1% of the time.
 */
const RECOUNT_MS = 1000;
const RECOUNT_SLOTS = 2 ** 20;
/**
 * The recount word: (recount periods since the epoch + 1, mod 2^37) << SIZE_BITS | the count then.
 * Periods are compared modulo 2^37 (4 000 years of seconds), so a clock far ahead never overflows it.
 */
const SIZE_BITS = 27n;
const SIZE_MASK = (1n << SIZE_BITS) - 1n;
const PERIOD_MASK = (1n << (64n - SIZE_BITS)) - 1n;

/** No slot: the key is not stored (find), or there is no room for it (findOrInsert). */
export const NOT_FOUND = -1;
/** Lost a race for a slot: look again. */
const AGAIN = -2;
/** A claim for the key at probe position k is encoded as CLAIM - k. */
const CLAIM = -3;

export class SharedKeyTable {
  readonly #words: BigUint64Array;
  readonly #mask: number;
  readonly #window: number;
  readonly #maxKeys: bigint;
  readonly #recountMs: number;

  constructor(words: BigUint64Array, slots: number, maxKeys: number) {
    this.#words = words;
    this.#mask = slots - 1;
    this.#window = Math.min(WINDOW, slots);
    this.#maxKeys = BigInt(maxKeys);
    this.#recountMs = RECOUNT_MS * Math.max(1, slots / RECOUNT_SLOTS);
  }

  /** The index of a slot's state word in the buffer. */
  stateIndex(slot: number): number {
    return HEADER_WORDS + 2 * slot + 1;
  }

  get size(): number {
    return Number(Atomics.load(this.#words, H.size));
  }

  /** The slot where key `h` (home slot from `low`) lives, or NOT_FOUND. Writes nothing but an un-retire. */
  find(h: bigint, low: number): number {
    const words = this.#words;
    for (let k = 0; k < this.#window; k++) {
      const slot = (low + k) & this.#mask;
      const v = Atomics.load(words, HEADER_WORDS + 2 * slot);
      if (v === h) return slot;
      if (v === 0n) return NOT_FOUND;
      if (v === (h | RETIRING) && this.#unretire(slot, h)) return slot;
    }
    return NOT_FOUND;
  }

  /** True when key `h` lives in `slot` (a slot remembered from an earlier call may have been given away since). */
  holds(slot: number, h: bigint): boolean {
    const v = Atomics.load(this.#words, HEADER_WORDS + 2 * slot);
    return v === h || (v === (h | RETIRING) && this.#unretire(slot, h));
  }

  /**
   * After deciding on `slot` for key `h`: true when the key still lives there, so the decision
   * stands; false when its slot was given away meanwhile, so the call must be decided again.
   */
  confirm(slot: number, h: bigint): boolean {
    return this.holds(slot, h);
  }

  /**
   * The slot of key `h`, stored now if it was not: in a never-used or free slot while fewer than
   * maxKeys keys are stored, else in the slot of a key `isIdle` says is idle. NOT_FOUND when there
   * is no room in the key's window.
   */
  findOrInsert(h: bigint, low: number, now: number, isIdle: (slot: number) => boolean): number {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const found = this.#claimOrFind(h, low, now, isIdle);
      if (found >= 0 || found === NOT_FOUND) return found;
      if (found === AGAIN) continue;
      // A claim for the key (ours or another thread's, maybe one that was stopped): settle it.
      const settled = this.#settle(h, low, CLAIM - found);
      if (settled >= 0) return settled;
    }
    return NOT_FOUND;
  }

  /**
   * One pass over the window: the key's slot if it is stored (>= 0); a pending claim for it, ours
   * or another's, to settle (CLAIM - position); AGAIN after losing a race; NOT_FOUND when there is no room.
   */
  #claimOrFind(h: bigint, low: number, now: number, isIdle: (slot: number) => boolean): number {
    const words = this.#words;
    let free = -1;
    let freeWord = 0n;
    for (let k = 0; k < this.#window; k++) {
      const slot = (low + k) & this.#mask;
      const v = Atomics.load(words, HEADER_WORDS + 2 * slot);
      if (v === h) return slot;
      if (v === (h | RETIRING) && this.#unretire(slot, h)) return slot;
      if (v === (h | PENDING)) return CLAIM - k;
      if (free < 0 && (v === 0n || v === FREE)) {
        free = k;
        freeWord = v;
      }
      if (v === 0n) break;
    }
    if (free < 0) {
      // Every slot of the window holds a key: the new one takes an idle one's slot.
      const k = this.#giveAway(low, isIdle, h | PENDING);
      return k < 0 ? NOT_FOUND : CLAIM - k;
    }
    if (!this.#reserveRoom()) {
      // maxKeys are stored: forget an idle key of the window first (its slot becomes FREE), then look again.
      return this.#giveAway(low, isIdle, FREE) >= 0 || this.#recount(now) ? AGAIN : NOT_FOUND;
    }
    const slot = (low + free) & this.#mask;
    if (Atomics.compareExchange(words, HEADER_WORDS + 2 * slot, freeWord, h | PENDING) === freeWord) return CLAIM - free;
    this.#releaseRoom();
    return AGAIN;
  }

  /**
   * Gives the slot of the first idle key in the window to `to` (a claim, or FREE) and returns its
   * probe position; -1 when every key there is active.
   */
  #giveAway(low: number, isIdle: (slot: number) => boolean, to: bigint): number {
    const words = this.#words;
    for (let k = 0; k < this.#window; k++) {
      const slot = (low + k) & this.#mask;
      const at = HEADER_WORDS + 2 * slot;
      let v = this.#settled(slot);
      if (v === 0n || v === FREE || (v & PENDING) !== 0n) continue;
      if ((v & RETIRING) === 0n) {
        if (Atomics.compareExchange(words, at, v, v | RETIRING) !== v) continue;
        v |= RETIRING;
      }
      // Read the state only once the mark is up: a decider that spends after this read sees the mark.
      if (!isIdle(slot)) {
        Atomics.compareExchange(words, at, v, v & ~RETIRING);
        continue;
      }
      if (Atomics.compareExchange(words, at, v, to) === v) {
        if (to === FREE) this.#releaseRoom();
        return k;
      }
    }
    return -1;
  }

  /**
   * Settles the claim for `h` at probe position `mine`: withdraws it when the key is stored elsewhere
   * or an earlier claim exists, withdraws later claims, then commits it. Returns the key's slot, or
   * AGAIN to start over.
   */
  #settle(h: bigint, low: number, mine: number): number {
    const words = this.#words;
    const mySlot = (low + mine) & this.#mask;
    const myAt = HEADER_WORDS + 2 * mySlot;
    for (let k = 0; k < this.#window; k++) {
      if (k === mine) continue;
      const slot = (low + k) & this.#mask;
      const at = HEADER_WORDS + 2 * slot;
      const v = Atomics.load(words, at);
      if (v === 0n) break;
      if (v === h || v === (h | RETIRING)) {
        this.#withdraw(myAt, h);
        return this.find(h, low);
      }
      if (v === (h | PENDING)) {
        if (k < mine) {
          this.#withdraw(myAt, h);
          return AGAIN;
        }
        const seen = Atomics.compareExchange(words, at, v, FREE);
        if (seen === v) this.#releaseRoom();
        else if (seen === h) {
          this.#withdraw(myAt, h);
          return slot;
        }
      }
    }
    return Atomics.compareExchange(words, myAt, h | PENDING, h) === (h | PENDING) ? mySlot : AGAIN;
  }

  /**
   * Whether `findOrInsert` would find room for the new key `h` (not stored, no claim for it) at
   * `now`, without storing it: what `peek` answers from. It may settle claims and heal the count, as
   * `findOrInsert` would, and changes nothing else.
   */
  hasRoom(low: number, now: number, isIdle: (slot: number) => boolean): boolean {
    let free = false;
    for (let k = 0; k < this.#window; k++) {
      const slot = (low + k) & this.#mask;
      const v = this.#settled(slot);
      // As there: an idle key anywhere in the window makes room; a free slot does while the count allows.
      if (v === 0n || v === FREE) free = true;
      else if ((v & PENDING) === 0n && isIdle(slot)) return true;
    }
    return free && (Atomics.load(this.#words, H.size) < this.#maxKeys || this.#recount(now));
  }

  /**
   * The key word of `slot`, once a claim found there (maybe of a stopped thread) is settled as its
   * own thread would have settled it: the claim's home is in its hash.
   */
  #settled(slot: number): bigint {
    const at = HEADER_WORDS + 2 * slot;
    const v = Atomics.load(this.#words, at);
    if ((v & PENDING) === 0n) return v;
    const h = v & ~PENDING;
    const home = Number(h & 0xffff_ffffn);
    const position = (slot - home) & this.#mask;
    if (position < this.#window) this.#settle(h, home, position);
    return Atomics.load(this.#words, at);
  }

  /**
   * Heals a key count raised by a stopped thread: true when it was found too high and lowered. Runs
   * only where the count would refuse a new key; the first such refusal notes the count and the
   * time, and one at least a recount period later that finds the same count counts the table (once per
   * period, whichever thread gets there) and sets the count to the keys and claims it holds.
   */
  #recount(now: number): boolean {
    const words = this.#words;
    const size = Atomics.load(words, H.size);
    const seen = Atomics.load(words, H.recount);
    const period = BigInt.asUintN(64 - Number(SIZE_BITS), BigInt(Math.floor(now / this.#recountMs) + 1)) || 1n;
    if (seen === 0n || (seen & SIZE_MASK) !== size) {
      Atomics.compareExchange(words, H.recount, seen, (period << SIZE_BITS) | size);
      return false;
    }
    if (((period - (seen >> SIZE_BITS)) & PERIOD_MASK) < 2n || Atomics.compareExchange(words, H.recount, seen, 0n) !== seen) return false;
    let live = 0n;
    for (let at = HEADER_WORDS; at < HEADER_WORDS + 2 * (this.#mask + 1); at += 2) {
      const v = Atomics.load(words, at);
      if (v !== 0n && v !== FREE) live++;
    }
    return live < size && Atomics.compareExchange(words, H.size, size, live) === size;
  }

  #withdraw(at: number, h: bigint): void {
    if (Atomics.compareExchange(this.#words, at, h | PENDING, FREE) === (h | PENDING)) this.#releaseRoom();
  }

  #unretire(slot: number, h: bigint): boolean {
    const seen = Atomics.compareExchange(this.#words, HEADER_WORDS + 2 * slot, h | RETIRING, h);
    return seen === (h | RETIRING) || seen === h;
  }

  /** Counts one more stored key unless maxKeys are stored (a refusal leaves the count as it was, so it can be seen standing still). */
  #reserveRoom(): boolean {
    const words = this.#words;
    for (;;) {
      const size = Atomics.load(words, H.size);
      if (size >= this.#maxKeys) return false;
      if (Atomics.compareExchange(words, H.size, size, size + 1n) === size) return true;
    }
  }

  #releaseRoom(): void {
    Atomics.sub(this.#words, H.size, 1n);
  }
}
