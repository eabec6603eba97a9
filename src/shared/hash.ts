// A key's identity in the shared table: SipHash-1-3 of its UTF-16 code units (little-endian bytes,
// so it is SipHash of the key's UTF-16LE encoding) under the buffer's 128-bit secret, drawn from
// crypto.getRandomValues when the buffer is made. SipHash is a keyed PRF: without the secret no key
// can be aimed at another's slot or hash, and every bit of the output depends on every input bit,
// so neither half can be solved for separately (the unkeyed two-lane hash it replaces could be, and
// a key sharing a victim's whole hash was found in 28 s). 1-3 rounds, as Rust's and Python's hash
// tables use it. Each 64-bit lane is kept as two int32 halves: JS has no fast 64-bit integers.
//
// 62 bits of the 64 identify the key (the key word keeps two flag bits, key-table.ts); the home slot
// is taken from the low 32. Among a million keys the chance of any collision is about 1e-7; a
// collision merges two keys' limits, which is stricter, never looser.

/** SipHash under one 128-bit secret, given as four 32-bit words (k0 low, k0 high, k1 low, k1 high). */
export class KeyHash {
  /** The low 32 bits of the last hash, unsigned: the key's home slot is taken from them. */
  low = 0;
  readonly #k0l: number;
  readonly #k0h: number;
  readonly #k1l: number;
  readonly #k1h: number;

  constructor(secret: Uint32Array) {
    this.#k0l = (secret[0] as number) | 0;
    this.#k0h = (secret[1] as number) | 0;
    this.#k1l = (secret[2] as number) | 0;
    this.#k1h = (secret[3] as number) | 0;
  }

  /** The key's hash, from 1 to 2^62 - 1 (never 0, which marks an unused slot). */
  hash(key: string): bigint {
    const [high, low] = this.sip(key);
    const top = high & 0x3fff_ffff;
    this.low = top === 0 && low === 0 ? 1 : low;
    return (BigInt(top) << 32n) | BigInt(this.low);
  }

  /** SipHash-1-3 of the key's UTF-16LE bytes: [high 32 bits, low 32 bits], unsigned. */
  sip(key: string): [number, number] {
    // v0..v3 = secret xor "somepseudorandomlygeneratedbytes", each as (high, low).
    let v0h = this.#k0h ^ 0x736f6d65;
    let v0l = this.#k0l ^ 0x70736575;
    let v1h = this.#k1h ^ 0x646f7261;
    let v1l = this.#k1l ^ 0x6e646f6d;
    let v2h = this.#k0h ^ 0x6c796765;
    let v2l = this.#k0l ^ 0x6e657261;
    let v3h = this.#k1h ^ 0x74656462;
    let v3l = this.#k1l ^ 0x79746573;
    const length = key.length;
    // Every 4 code units are one 8-byte block; the last block holds what is left and, in its top
    // byte, the byte length mod 256. The 3 finishing rounds follow, after v2 ^= 0xff.
    const blocks = (length >>> 2) + 1;
    let mh = 0;
    let ml = 0;
    for (let step = 0; step < blocks + 3; step++) {
      if (step < blocks) {
        const i = step << 2;
        if (step < blocks - 1) {
          ml = key.charCodeAt(i) | (key.charCodeAt(i + 1) << 16);
          mh = key.charCodeAt(i + 2) | (key.charCodeAt(i + 3) << 16);
        } else {
          const left = length - i;
          ml = (left > 0 ? key.charCodeAt(i) : 0) | (left > 1 ? key.charCodeAt(i + 1) << 16 : 0);
          mh = (left > 2 ? key.charCodeAt(i + 2) : 0) | ((length << 1) << 24);
        }
        v3h ^= mh;
        v3l ^= ml;
      } else if (step === blocks) {
        v2l ^= 0xff;
      }
      // One SipRound on (high, low) int32 pairs: additions carry from low to high; rotl(x, 32) swaps the halves.
      let s = (v0l >>> 0) + (v1l >>> 0);
      v0h = (v0h + v1h + (s > 0xffff_ffff ? 1 : 0)) | 0;
      v0l = s | 0;
      let t = v1h;
      v1h = (t << 13) | (v1l >>> 19);
      v1l = (v1l << 13) | (t >>> 19);
      v1h ^= v0h;
      v1l ^= v0l;
      t = v0h;
      v0h = v0l;
      v0l = t;
      s = (v2l >>> 0) + (v3l >>> 0);
      v2h = (v2h + v3h + (s > 0xffff_ffff ? 1 : 0)) | 0;
      v2l = s | 0;
      t = v3h;
      v3h = (t << 16) | (v3l >>> 16);
      v3l = (v3l << 16) | (t >>> 16);
      v3h ^= v2h;
      v3l ^= v2l;
      s = (v0l >>> 0) + (v3l >>> 0);
      v0h = (v0h + v3h + (s > 0xffff_ffff ? 1 : 0)) | 0;
      v0l = s | 0;
      t = v3h;
      v3h = (t << 21) | (v3l >>> 11);
      v3l = (v3l << 21) | (t >>> 11);
      v3h ^= v0h;
      v3l ^= v0l;
      s = (v2l >>> 0) + (v1l >>> 0);
      v2h = (v2h + v1h + (s > 0xffff_ffff ? 1 : 0)) | 0;
      v2l = s | 0;
      t = v1h;
      v1h = (t << 17) | (v1l >>> 15);
      v1l = (v1l << 17) | (t >>> 15);
      v1h ^= v2h;
      v1l ^= v2l;
      t = v2h;
      v2h = v2l;
      v2l = t;
      if (step < blocks) {
        v0h ^= mh;
        v0l ^= ml;
      }
    }
    return [(v0h ^ v1h ^ v2h ^ v3h) >>> 0, (v0l ^ v1l ^ v2l ^ v3l) >>> 0];
  }
}

/** A new 128-bit secret from `crypto.getRandomValues`, as `KeyHash` takes it. */
export function newSecret(): Uint32Array {
  // Into a local array: browsers refuse to fill a view of a SharedArrayBuffer.
  return crypto.getRandomValues(new Uint32Array(4));
}
