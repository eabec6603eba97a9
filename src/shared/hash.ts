// A 62-bit hash of a key's UTF-16 code units: two 32-bit lanes with different multipliers, each
// finished with murmur3's fmix32 after a cross-mix, so every input bit reaches both halves. 62 bits
// leave the key word two flag bits (key-table.ts). Among a million keys the chance of any collision
// is about 1e-7; a collision merges two keys' limits, which is stricter, never looser.

/** The low 32 bits of the last hash: the key's home slot is taken from it. */
export let lastLow = 0;

/** The key's hash, from 1 to 2^62 - 1 (never 0, which marks an unused slot). */
export function hashKey(key: string): bigint {
  let a = 0x811c9dc5 ^ key.length;
  let b = 0x9747b28c;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  a ^= b >>> 15;
  b ^= a >>> 13;
  a = fmix(a);
  b = fmix(b ^ 0x27d4eb2f);
  lastLow = a >>> 0;
  const high = b & 0x3fff_ffff;
  if (high === 0 && lastLow === 0) lastLow = 1;
  return (BigInt(high) << 32n) | BigInt(lastLow);
}

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}
