// src/shared/hash.ts (the keyed hash of the shared key table) and what it buys: keys cannot be aimed
// at a slot without the buffer's secret, so the table fills as with random keys, and slotsFor()
// keeps its windows from filling while room exists.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { SharedKeyedRateLimiter } from '../../src/shared';
import { KeyHash, newSecret } from '../../src/shared/hash';
import { MAX_KEYS, slotsFor } from '../../src/shared/layout';
import { craftedKeys } from './crafted-keys';

const MASK = (1n << 64n) - 1n;
const rotl = (x: bigint, b: bigint) => ((x << b) | (x >> (64n - b))) & MASK;

/** SipHash-c-d of `bytes` under a 128-bit key, written from the paper in BigInt: the reference. */
function sipReference(c: number, d: number, key: Uint8Array, bytes: Uint8Array): bigint {
  const word = (b: Uint8Array, at: number) => {
    let w = 0n;
    for (let i = 7; i >= 0; i--) w = (w << 8n) | BigInt(b[at + i] ?? 0);
    return w;
  };
  const k0 = word(key, 0);
  const k1 = word(key, 8);
  const v = [k0 ^ 0x736f6d6570736575n, k1 ^ 0x646f72616e646f6dn, k0 ^ 0x6c7967656e657261n, k1 ^ 0x7465646279746573n] as [bigint, bigint, bigint, bigint];
  const round = () => {
    v[0] = (v[0] + v[1]) & MASK; v[1] = rotl(v[1], 13n); v[1] ^= v[0]; v[0] = rotl(v[0], 32n);
    v[2] = (v[2] + v[3]) & MASK; v[3] = rotl(v[3], 16n); v[3] ^= v[2];
    v[0] = (v[0] + v[3]) & MASK; v[3] = rotl(v[3], 21n); v[3] ^= v[0];
    v[2] = (v[2] + v[1]) & MASK; v[1] = rotl(v[1], 17n); v[1] ^= v[2]; v[2] = rotl(v[2], 32n);
  };
  const padded = new Uint8Array(Math.floor(bytes.length / 8) * 8 + 8);
  padded.set(bytes);
  padded[padded.length - 1] = bytes.length & 0xff;
  for (let at = 0; at < padded.length; at += 8) {
    const m = word(padded, at);
    v[3] ^= m;
    for (let i = 0; i < c; i++) round();
    v[0] ^= m;
  }
  v[2] ^= 0xffn;
  for (let i = 0; i < d; i++) round();
  return v[0] ^ v[1] ^ v[2] ^ v[3];
}

const sequence = (n: number) => Uint8Array.from({ length: n }, (_, i) => i);
const utf16le = (key: string) => {
  const bytes = new Uint8Array(2 * key.length);
  for (let i = 0; i < key.length; i++) {
    bytes[2 * i] = key.charCodeAt(i) & 0xff;
    bytes[2 * i + 1] = key.charCodeAt(i) >> 8;
  }
  return bytes;
};

describe('the key hash', () => {
  it("the reference reproduces SipHash-2-4's published vectors (key 00..0f, message 00..n-1)", () => {
    expect(sipReference(2, 4, sequence(16), sequence(0))).toBe(0x726fdb47dd0e0e31n);
    expect(sipReference(2, 4, sequence(16), sequence(1))).toBe(0x74f839c593dc67fdn);
    expect(sipReference(2, 4, sequence(16), sequence(15))).toBe(0xa129ca6149be45e5n); // the paper's example
  });

  test.prop([fc.uint32Array({ minLength: 4, maxLength: 4 }), fc.string({ unit: 'binary', maxLength: 40 })])(
    "is SipHash-1-3 of the key's UTF-16LE bytes under the secret",
    (secret, key) => {
      const bytes = new Uint8Array(secret.buffer, secret.byteOffset, 16);
      const [high, low] = new KeyHash(secret).sip(key);
      expect((BigInt(high) << 32n) | BigInt(low)).toBe(sipReference(1, 3, bytes, utf16le(key)));
    },
  );

  it('every thread attached to a buffer hashes with the secret in its header; one key hashes differently in two buffers', () => {
    const make = () => new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(4), maxKeys: 100, clock: new ManualClock(0) });
    const keyWord = (buffer: SharedArrayBuffer) => new BigUint64Array(buffer).slice(16).filter((_, i) => i % 2 === 0).find((w) => w !== 0n);
    const words = new Set<bigint | undefined>();
    for (let i = 0; i < 50; i++) {
      const one = make();
      one.tryAcquire('alice|203.0.113.7', 4);
      expect(SharedKeyedRateLimiter.attach(one.buffer, { clock: new ManualClock(0) }).tryAcquire('alice|203.0.113.7').allowed).toBe(false);
      words.add(keyWord(one.buffer));
    }
    expect(words.size).toBe(50);
    expect(words.has(undefined)).toBe(false);
  });

  const slots = slotsFor(1000);
  const keys = craftedKeys('alice|203.0.113.7', slots, 64);
  test.prop([fc.uint32Array({ minLength: 4, maxLength: 4 })], { numRuns: 200 })(
    'keys crafted to share one home slot without the secret spread over the table under any secret',
    (secret) => {
      const hash = new KeyHash(secret);
      const homes = new Map<number, number>();
      for (const key of keys) {
        hash.hash(key);
        const home = hash.low & (slots - 1);
        homes.set(home, (homes.get(home) ?? 0) + 1);
      }
      // 64 random keys in 4096 slots: five on one home about once in 3·10^7 tables.
      expect(Math.max(...homes.values())).toBeLessThanOrEqual(4);
    },
  );

  it('two equal-length keys differing in one code unit differ in about half of the hash bits', () => {
    const hash = new KeyHash(newSecret());
    let flipped = 0;
    for (let i = 0; i < 1000; i++) {
      const a = hash.sip(`user:${i}:a`);
      const b = hash.sip(`user:${i}:b`);
      flipped += popcount(((a[0] ^ b[0]) >>> 0)) + popcount(((a[1] ^ b[1]) >>> 0));
    }
    expect(flipped / 1000).toBeGreaterThan(30);
    expect(flipped / 1000).toBeLessThan(34);
  });
});

function popcount(x: number): number {
  let n = 0;
  for (; x !== 0; x &= x - 1) n++;
  return n;
}

/**
 * The chance that a new key's 64 slots from a uniformly random home are all taken, at load α: the
 * limit of a large table under linear probing (a key takes the first free slot from its home).
 * Slot by slot, keys still looking for a slot pass on as a queue: slot i is taken exactly when that
 * queue plus the keys whose home is i is at least 1, and what is left passes on. Homes are
 * independent and uniform (a PRF under a secret no one outside knows), so each slot is the home of
 * Poisson(α) keys. Start from the queue's stationary distribution; sum the chance of `window`
 * slots in a row taken.
 */
function windowFullChance(alpha: number, window: number): number {
  const CAP = 300;
  const arrivals: number[] = [];
  for (let k = 0, p = Math.exp(-alpha); k < 60; k++, p *= alpha / k) arrivals.push(p);
  const step = (from: Float64Array, taken: boolean) => {
    const to = new Float64Array(CAP);
    from.forEach((p, queue) => {
      if (p === 0) return;
      arrivals.forEach((a, k) => {
        if (queue + k === 0) {
          if (!taken) to[0] = (to[0] as number) + p * a;
        } else if (queue + k - 1 < CAP) to[queue + k - 1] = (to[queue + k - 1] as number) + p * a;
      });
    });
    return to;
  };
  let queue = new Float64Array(CAP);
  queue[0] = 1;
  for (let i = 0; i < 3000; i++) queue = step(queue, false);
  for (let i = 0; i < window; i++) queue = step(queue, true);
  return queue.reduce((a, b) => a + b, 0);
}

/** The same chance measured: `keys` keys placed by linear probing in `slots` slots, each home from a seeded generator. */
function windowFullMeasured(slots: number, keys: number, window: number, seed: number): number {
  let s = seed;
  const random = () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) % slots;
  };
  const taken = new Uint8Array(slots);
  for (let placed = 0; placed < keys; ) {
    const home = random();
    let k = 0;
    while (k < window && taken[(home + k) % slots]) k++;
    if (k === window) continue;
    taken[(home + k) % slots] = 1;
    placed++;
  }
  let full = 0;
  for (let home = 0; home < slots; home++) {
    let k = 0;
    while (k < window && taken[(home + k) % slots]) k++;
    if (k === window) full++;
  }
  return full / slots;
}

describe('a new key refused while room exists', () => {
  it('the model agrees with a simulation where refusals are common enough to count (a window of 16 at 40%)', () => {
    const slots = 2 ** 18;
    let measured = 0;
    for (let seed = 1; seed <= 4; seed++) measured += windowFullMeasured(slots, 0.4 * slots, 16, seed * 7919) / 4;
    const model = windowFullChance(0.4, 16);
    expect(model).toBeGreaterThan(1e-4);
    expect(measured / model).toBeGreaterThan(0.7);
    expect(measured / model).toBeLessThan(1.3);
  });

  it('happens less than once in 10^9 insertions at maxKeys keys, for every maxKeys (the 64-slot window at 40% load at most)', () => {
    let worst = 0;
    for (let k = 0; 2 ** k <= MAX_KEYS; k++) {
      for (const maxKeys of [2 ** k, Math.ceil(2 ** k * 0.4) + 1, Math.floor(2 ** k * 0.4)]) {
        if (maxKeys >= 1 && maxKeys <= MAX_KEYS) worst = Math.max(worst, maxKeys / slotsFor(maxKeys));
      }
    }
    expect(worst).toBeLessThanOrEqual(0.4);
    expect(windowFullChance(worst, 64)).toBeLessThan(1e-9);
    // Half full, as tables were sized before, it was 7e-8: too often.
    expect(windowFullChance(0.5, 64)).toBeGreaterThan(1e-8);
  });

  it('a real table filled to maxKeys with random keys under its secret refuses none of them', () => {
    const maxKeys = Math.floor(0.4 * 2 ** 16); // the highest load slotsFor allows
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'fixed-window', rule: new Rule(1, 3_600_000), maxKeys, clock: new ManualClock(0) });
    let refused = 0;
    for (let i = 0; i < maxKeys; i++) if (limiter.tryAcquire(`user:${i}`).degraded !== undefined) refused++;
    expect(refused).toBe(0);
    expect(limiter.size).toBe(maxKeys);
  });
});
