import type { Workload } from './contenders';

/** Length of every key order: a power of two, so a position wraps with a mask. */
const ORDER_LENGTH = 1 << 20;

/** A deterministic PRNG (xorshift32), so every run and every contender sees the same order. */
export function xorshift(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state;
  };
}

/** The key strings of `count` users, as a server would see them. */
export function userKeys(count: number, prefix = 'user:'): string[] {
  const keys = new Array<string>(count);
  for (let i = 0; i < count; i++) keys[i] = `${prefix}${i}`;
  return keys;
}

/** One key, every time. */
export function hotKeyWorkload(): Workload {
  return { keys: ['user:42'], order: new Uint32Array(ORDER_LENGTH) };
}

/**
 * `count` keys in random order: back-to-back random permutations, so every key is touched once per
 * `count` decisions and the memory they live in is visited in no useful order.
 */
export function manyKeysWorkload(count: number, seed = 12345): Workload {
  const random = xorshift(seed);
  const order = new Uint32Array(ORDER_LENGTH);
  const permutation = Uint32Array.from({ length: count }, (_, i) => i);
  for (let filled = 0; filled < ORDER_LENGTH; filled += count) {
    for (let i = count - 1; i > 0; i--) {
      const j = random() % (i + 1);
      const swap = permutation[i] as number;
      permutation[i] = permutation[j] as number;
      permutation[j] = swap;
    }
    order.set(permutation.subarray(0, Math.min(count, ORDER_LENGTH - filled)), filled);
  }
  return { keys: userKeys(count), order };
}

/** `count` keys touched in the order they were made, over and over: the memory-friendly best case. */
export function roundRobinWorkload(count: number): Workload {
  const order = new Uint32Array(ORDER_LENGTH);
  for (let i = 0; i < ORDER_LENGTH; i++) order[i] = i % count;
  return { keys: userKeys(count), order };
}
