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

  constructor(words: BigUint64Array, slots: number, maxKeys: number) {
    this.#words = words;
    this.#mask = slots - 1;
    this.#window = Math.min(WINDOW, slots);
    this.#maxKeys = BigInt(maxKeys);
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

  /**
   * After deciding on `slot` for key `h`: true when the key still lives there, so the decision
   * stands; false when its slot was given away meanwhile, so the call must be decided again.
   */
  confirm(slot: number, h: bigint): boolean {
    const v = Atomics.load(this.#words, HEADER_WORDS + 2 * slot);
    return v === h || (v === (h | RETIRING) && this.#unretire(slot, h));
  }

  /**
   * The slot of key `h`, stored now if it was not: in a never-used or free slot while fewer than
   * maxKeys keys are stored, else in the slot of a key `isIdle` says is idle. NOT_FOUND when there
   * is no room in the key's window.
   */
  findOrInsert(h: bigint, low: number, isIdle: (slot: number) => boolean): number {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const found = this.#claimOrFind(h, low, isIdle);
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
  #claimOrFind(h: bigint, low: number, isIdle: (slot: number) => boolean): number {
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
      return this.#giveAway(low, isIdle, FREE) < 0 ? NOT_FOUND : AGAIN;
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
      let v = Atomics.load(words, at);
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

  #withdraw(at: number, h: bigint): void {
    if (Atomics.compareExchange(this.#words, at, h | PENDING, FREE) === (h | PENDING)) this.#releaseRoom();
  }

  #unretire(slot: number, h: bigint): boolean {
    const seen = Atomics.compareExchange(this.#words, HEADER_WORDS + 2 * slot, h | RETIRING, h);
    return seen === (h | RETIRING) || seen === h;
  }

  /** Counts one more stored key unless maxKeys are stored. */
  #reserveRoom(): boolean {
    if (Atomics.add(this.#words, H.size, 1n) < this.#maxKeys) return true;
    this.#releaseRoom();
    return false;
  }

  #releaseRoom(): void {
    Atomics.sub(this.#words, H.size, 1n);
  }
}
