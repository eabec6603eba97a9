/**
 * Entries at which a shard splits in two. The split is one call's extra work; the keys it moves are
 * cold in memory, so at 4096 the slowest call while reclaiming a million keys took 0.9-1.2 ms, and
 * at 2048 0.6-0.9 ms (bench/latency.ts). At 1024 there were twice as many shards, and lookups in
 * 100 000 keys visited in creation order lost what fewer shards gained (2.1-2.3x the floor).
 */
const SPLIT_AT = 2048;
/** The most hash bits a shard is chosen by: 4096 shards hold 8 million keys before any grows past SPLIT_AT. */
const MAX_DEPTH = 12;

/**
 * A `Map` from string keys that splits itself into smaller maps (shards) chosen by a hash of the
 * key, one shard at a time, so that no single insert or delete stalls.
 *
 * V8 rebuilds the whole hash table of a `Map` inside one `set` or `delete` (when it grows, shrinks,
 * or fills with deleted slots). Reclaiming a million keys, that one call took 60-75 ms, a bare Map
 * the same (bench/latency.ts). Here a shard splits in two when it reaches 2048 entries, as in
 * extendible hashing: a directory indexed by the top bits of the key's hash points at the shards,
 * and only the full shard's entries move. No shard holds much more than 2048 entries, so no call
 * waits on more than that; yet there are only as many shards as the keys need (64 for 100 000 keys),
 * because every shard is a table the lookups no longer share: the 256 shards this table used to make
 * at 4096 keys cost 100 000 keys visited in creation order 2.2-2.5x the floor, against 1.7-1.8x now
 * (measured). Shards never merge: a table that shrinks keeps its shards, each smaller. Below 2048
 * entries there is one map and no key is hashed, so a small table, and the hot key, pays one extra
 * branch.
 */
export class ShardedMap<V> {
  /** The one map, until the first split; undefined after it. */
  #whole: Map<string, V> | undefined = new Map();
  /** The shard for each value of the hash's top `#depth` bits; a shard split on fewer bits fills a run of slots. */
  #slots: Map<string, V>[] = [];
  /** How many top bits of the hash each slot's shard was split on. */
  #slotDepth = new Uint8Array(0);
  #depth = 0;
  /** Every shard once: what iteration and the round of `nextEntry` walk. */
  #shards: Map<string, V>[] = [this.#whole as Map<string, V>];
  #size = 0;
  /** Where `nextEntry` resumes: a live iterator of one shard, and which shard that is. */
  #hand: Iterator<[string, V]> | undefined;
  #handShard = 0;

  get size(): number {
    return this.#size;
  }

  get(key: string): V | undefined {
    return (this.#whole ?? (this.#slots[hashOf(key) >>> (32 - this.#depth)] as Map<string, V>)).get(key);
  }

  set(key: string, value: V): void {
    const hash = this.#whole === undefined ? hashOf(key) : 0;
    const map = this.#whole ?? (this.#slots[hash >>> (32 - this.#depth)] as Map<string, V>);
    const before = map.size;
    map.set(key, value);
    this.#size += map.size - before;
    if (map.size >= SPLIT_AT) this.#split(map, hash);
  }

  delete(key: string): boolean {
    const deleted = (this.#whole ?? (this.#slots[hashOf(key) >>> (32 - this.#depth)] as Map<string, V>)).delete(key);
    if (deleted) this.#size--;
    return deleted;
  }

  /** Every entry, shard by shard. Entries may be deleted meanwhile, but none set: a set may split a shard. */
  *[Symbol.iterator](): IterableIterator<[string, V]> {
    for (const shard of this.#shards) yield* shard;
  }

  /**
   * The next entry of an endless round over every entry, or undefined when there are none. Like a
   * `Map` iterator, the round survives inserts, deletes and splits: each entry comes up once per
   * round wherever the entries around it come and go, or twice when its shard splits during the round.
   */
  nextEntry(): [string, V] | undefined {
    if (this.#size === 0) return undefined;
    for (;;) {
      const step = this.#hand?.next();
      if (step !== undefined && step.done !== true) return step.value;
      // This shard is done (or the round not started): go on from the start of the next shard.
      this.#handShard = (this.#handShard + 1) % this.#shards.length;
      this.#hand = (this.#shards[this.#handShard] as Map<string, V>).entries();
    }
  }

  /** Splits the shard holding the key with this hash in two, on the next bit of the hash. */
  #split(full: Map<string, V>, hash: number): void {
    // The first split: the one map becomes the one shard, split on no bits yet.
    if (this.#whole !== undefined) {
      this.#whole = undefined;
      this.#slots = [full];
      this.#slotDepth = new Uint8Array(1);
    }
    const depth = this.#slotDepth[this.#depth === 0 ? 0 : hash >>> (32 - this.#depth)] as number;
    if (depth >= MAX_DEPTH) return;
    if (depth === this.#depth) this.#doubleSlots();
    const span = 1 << (this.#depth - depth);
    const first = (hash >>> (32 - this.#depth)) & ~(span - 1);
    const low = new Map<string, V>();
    const high = new Map<string, V>();
    for (const [key, value] of full) ((hashOf(key) >>> (31 - depth)) & 1 ? high : low).set(key, value);
    this.#slots.fill(low, first, first + span / 2).fill(high, first + span / 2, first + span);
    this.#slotDepth.fill(depth + 1, first, first + span);
    const index = this.#shards.indexOf(full);
    this.#shards[index] = low;
    this.#shards.push(high);
    // An iterator of the old shard would go on yielding entries it no longer holds: start it over.
    if (this.#handShard === index) {
      this.#hand = undefined;
      this.#handShard = index - 1;
    }
  }

  /** Indexes the slots by one more bit of the hash; each shard fills twice as many slots. */
  #doubleSlots(): void {
    const slots = this.#slots;
    const depths = this.#slotDepth;
    this.#slots = Array.from({ length: slots.length * 2 }, (_, i) => slots[i >> 1] as Map<string, V>);
    this.#slotDepth = new Uint8Array(depths.length * 2).map((_, i) => depths[i >> 1] as number);
    this.#depth++;
  }
}

/**
 * The 32-bit FNV-1a hash of a key. Every character counts, so keys that differ anywhere (`user:1`,
 * `user:2`; a shared suffix such as a route) spread over all shards.
 */
function hashOf(key: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}
