/** The longest block: 2^42 ms, about 139 years, so that every block has an end a store can keep. */
export const MAX_BLOCK_MS = 2 ** 42;

/** Expired blocks examined, at most, each time a block is added, so that forgotten ones do not pile up. */
const SWEEP_PER_BLOCK = 2;

/**
 * The blocks of a keyed limiter: until when each blocked key is refused. Kept apart from the keys'
 * states, so that no charge, refund or reconfiguration can lift a block, and so that a limiter with
 * no block pays one size check per decision. Expired blocks leave when next looked at, a few at a
 * time as blocks are added, and on `evictIdle`.
 */
export class KeyBlocks {
  readonly #until = new Map<string, number>();

  get size(): number {
    return this.#until.size;
  }

  /** When the block on `key` ends, or undefined when it is not blocked at `now`. */
  until(key: string, now: number): number | undefined {
    const until = this.#until.get(key);
    if (until === undefined || until > now) return until;
    this.#until.delete(key);
    return undefined;
  }

  /** Whether `key` is blocked at `now`: a blocked key is never reclaimed as idle. */
  has(key: string, now: number): boolean {
    return this.#until.size !== 0 && this.until(key, now) !== undefined;
  }

  /** Blocks `key` until `until`, unless it already is for longer. */
  add(key: string, until: number, now: number): void {
    let examined = 0;
    for (const [other, end] of this.#until) {
      if (examined++ === SWEEP_PER_BLOCK) break;
      // Moved to the back whether expired or not, so the next sweep looks at others.
      this.#until.delete(other);
      if (end > now) this.#until.set(other, end);
    }
    const current = this.#until.get(key);
    if (current === undefined || current < until) this.#until.set(key, until);
  }

  delete(key: string): void {
    this.#until.delete(key);
  }

  /** Forgets every expired block. */
  sweep(now: number): void {
    for (const [key, until] of this.#until) if (until <= now) this.#until.delete(key);
  }
}

/**
 * What keeps a resident key from being reclaimed while idle: someone waits on it, or it is blocked.
 * `until` tells when that could end at the earliest: a block's end, or for a line never by itself
 * (the limiter tells the table when a line ends), so a full table looks at a pinned key again only
 * then, not every ms.
 */
export class KeyPins {
  readonly #waiting: { has(key: string): boolean };
  readonly #blocks: KeyBlocks;

  constructor(waiting: { has(key: string): boolean }, blocks: KeyBlocks) {
    this.#waiting = waiting;
    this.#blocks = blocks;
  }

  has(key: string, now: number): boolean {
    return this.#waiting.has(key) || this.#blocks.has(key, now);
  }

  /** When the pin on `key` could end: undefined when there is none, Infinity while someone waits on it. */
  until(key: string, now: number): number | undefined {
    return this.#waiting.has(key) ? Infinity : this.#blocks.until(key, now);
  }
}
