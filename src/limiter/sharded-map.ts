/** Entries at which a map splits into shards. Moving them all is one call's extra work, well under a ms. */
const SPLIT_AT = 4096;
/** log2 of the most shards: 256 shards keep every shard of a million keys near 4000 entries. */
const MAX_SHARD_BITS = 8;

/**
 * A `Map` from string keys that splits itself into smaller maps (256 at most), chosen by a hash of
 * the key, once it holds 4096 entries, so that no single insert or delete stalls.
 *
 * V8 rebuilds the whole hash table of a `Map` inside one `set` or `delete` (when it grows, shrinks,
 * or fills with deleted slots): reclaiming a million keys, that one call stalls for tens of ms.
 * Split, a million keys make shards of ~4000 and no call stalls (bench/latency.ts). Below 4096
 * entries there is one map and no key is hashed, so a small table, and the hot key, pays one extra
 * branch. The price is on large tables: a lookup hashes its key and loses the locality of one table.
 *
 * A map told its most entries makes only as many shards as keep each under 4096 at that size: a
 * key table with `maxKeys: 100_000` has 32. Fewer shards keep more locality, so lookups and floods
 * cost less (bench/HISTORY.md).
 *
 * Tried and dropped: shards that split in two at 2048 keys (extendible hashing). Fewer shards, but
 * while a million idle keys were replaced the sweep emptied shards one at a time, the others split,
 * shards never merged, and the slowest call got slower (bench/HISTORY.md).
 */
export class ShardedMap<V> {
  /** The one map, until the split; undefined after it. */
  #whole: Map<string, V> | undefined = new Map();
  #shards: Map<string, V>[] = [];
  /** log2 of the shard count once split. */
  readonly #bits: number;
  #size = 0;
  /** Where `nextEntry` resumes: a live iterator of one map, and which shard that is. */
  #hand: Iterator<[string, V]> | undefined;
  #handShard = 0;
  /** The hash's seed (see `shardOf`): keys cannot be chosen ahead to share a shard. */
  readonly seed: number;

  /**
   * @param mostEntries the most entries the map will hold, when bounded: it sizes the shards.
   * @param seed the hash's seed: one per limiter, drawn at random by default.
   */
  constructor(mostEntries = Infinity, seed = shardSeed()) {
    // The fewest shards of at most SPLIT_AT entries each when full; none when the map never splits.
    this.#bits = Math.min(MAX_SHARD_BITS, Math.max(0, Math.ceil(Math.log2(mostEntries / SPLIT_AT))));
    this.seed = seed;
  }

  get size(): number {
    return this.#size;
  }

  get(key: string): V | undefined {
    return this.#mapOf(key).get(key);
  }

  set(key: string, value: V): void {
    const map = this.#mapOf(key);
    const before = map.size;
    map.set(key, value);
    this.#size += map.size - before;
    if (this.#whole !== undefined && this.#size >= SPLIT_AT && this.#bits > 0) this.#split(this.#whole);
  }

  delete(key: string): boolean {
    const deleted = this.#mapOf(key).delete(key);
    if (deleted) this.#size--;
    return deleted;
  }

  /** Deletes the entry of `key` only if its value is `value`; whether it did. */
  deleteIf(key: string, value: V): boolean {
    const map = this.#mapOf(key);
    if (map.get(key) !== value || !map.delete(key)) return false;
    this.#size--;
    return true;
  }

  /** Every entry, shard by shard. Entries may be deleted meanwhile; entries set meanwhile may be missed. */
  *[Symbol.iterator](): IterableIterator<[string, V]> {
    if (this.#whole !== undefined) yield* this.#whole;
    else for (const shard of this.#shards) yield* shard;
  }

  /**
   * The next entry of an endless round over every entry, or undefined when there are none. Like a
   * `Map` iterator, the round survives inserts and deletes, so each entry comes up once per round
   * wherever the entries around it come and go.
   */
  nextEntry(): [string, V] | undefined {
    if (this.#size === 0) return undefined;
    for (;;) {
      const step = this.#hand?.next();
      if (step !== undefined && step.done !== true) return step.value;
      // This map is done (or the round not started): go on from the start of the next shard.
      this.#handShard = (this.#handShard + 1) % Math.max(1, this.#shards.length);
      this.#hand = (this.#whole ?? (this.#shards[this.#handShard] as Map<string, V>)).entries();
    }
  }

  #mapOf(key: string): Map<string, V> {
    return this.#whole ?? (this.#shards[shardOf(key, this.#bits, this.seed)] as Map<string, V>);
  }

  #split(whole: Map<string, V>): void {
    this.#shards = Array.from({ length: 1 << this.#bits }, () => new Map<string, V>());
    this.#whole = undefined;
    for (const [key, value] of whole) this.#mapOf(key).set(key, value);
    this.#hand = undefined;
  }
}

/**
 * The shard of a key among `2^bits`: the top bits of a 32-bit FNV-1a hash started from `seed`, then
 * mixed (murmur3's finalizer) so that the top bits depend on every bit of the seed and of the key.
 * Every character counts, so keys that differ anywhere (`user:1`, `user:2`; a shared suffix such as
 * a route) spread over all shards; and unseeded, keys could be crafted offline to share one shard,
 * whose rebuilds stall calls again (SECURITY.md). Returns the index, not the hash: a hash past 2^30
 * is no small integer, and returned it was a heap number allocated per lookup (16 B of a flood
 * call's ~300).
 */
export function shardOf(key: string, bits: number, seed: number): number {
  let hash = seed;
  for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  hash = Math.imul(hash ^ (hash >>> 16), 0x85ebca6b);
  hash = Math.imul(hash ^ (hash >>> 13), 0xc2b2ae35);
  return (hash ^ (hash >>> 16)) >>> (32 - bits);
}

/**
 * A random 32-bit seed. `Math.random` rather than `crypto`: the core uses nothing outside the
 * language, and the seed only has to be unknown to whoever chooses keys, who never sees its output.
 */
export function shardSeed(): number {
  return (Math.random() * 2 ** 32) >>> 0;
}
