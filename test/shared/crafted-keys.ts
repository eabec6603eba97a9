// Keys an attacker crafts offline against the hash ratekeeper/shared used before its key table had a
// secret (hardening.test.ts, key-hash.test.ts).

/**
 * The home slot a key had under the hash without a secret that ratekeeper/shared used before: public
 * code, so an attacker could search offline for keys sharing a victim's home (and, its two halves
 * being separable, for a key sharing the victim's whole hash, found in 28 s).
 */
function unkeyedHome(key: string, slots: number): number {
  let a = 0x811c9dc5 ^ key.length;
  let b = 0x9747b28c;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  a ^= b >>> 15;
  b ^= a >>> 13;
  a ^= a >>> 16;
  a = Math.imul(a, 0x85ebca6b);
  a ^= a >>> 13;
  a = Math.imul(a, 0xc2b2ae35);
  a ^= a >>> 16;
  return (a >>> 0) & (slots - 1);
}

/** `count` keys an attacker crafted to share `victim`'s home slot under the unkeyed hash. */
export function craftedKeys(victim: string, slots: number, count: number): string[] {
  const home = unkeyedHome(victim, slots);
  const keys: string[] = [];
  for (let i = 0; keys.length < count; i++) {
    const key = `mallory|${i}`;
    if (unkeyedHome(key, slots) === home) keys.push(key);
  }
  return keys;
}
