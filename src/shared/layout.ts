import { describe, integerIn } from '../core/validate';
import { rangeError, typeError } from '../core/errors';
import { Rule } from '../core/rule';

// The buffer of a SharedKeyedRateLimiter, read through one BigUint64Array:
//
//   words 0..15   header (below): written once by the creator before the buffer is shared, except
//                 LATEST, SIZE and RECOUNT, which every thread updates atomically
//   16 + 2i       key word of slot i: 0 (never used), a key hash, or a hash with a flag (key-table.ts)
//   17 + 2i       state word of slot i: the algorithm's whole state for that key, zero = a fresh key
//   after those   sliding-window-log only: `ring` timestamps per slot (sliding-window-log-ring.ts)
//
// A slot's key word and state word sit side by side, so a key costs one cache line, not two.

/** The five algorithms, named as `RedisRateLimiter` names them; the index is the header's code. */
export const ALGORITHMS = ['token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter'] as const;

/** One of the five algorithms a shared limiter runs, named as `RedisRateLimiter` names them. */
export type SharedAlgorithm = (typeof ALGORITHMS)[number];

export const MAGIC = 0x72_6b_73_68_61_72_65_64n; // "rkshared"
/** 2: the key hash is SipHash-1-3 under the secret in SECRET (1 hashed without a secret). */
export const VERSION = 2n;
export const HEADER_WORDS = 16;
export const H = {
  magic: 0,
  version: 1,
  algorithm: 2,
  limit: 3,
  windowMs: 4,
  maxKeys: 5,
  slots: 6,
  ring: 7,
  epoch: 8,
  latest: 9,
  size: 10,
  /** The key hash's 128-bit secret, two words (hash.ts). */
  secret: 11,
  /** The key count last seen refusing a new key, and when: 0 for never (key-table.ts). */
  recount: 13,
} as const;

/**
 * The least uptime every accepted rule is exact for: ten years (of 365.25 days) from the creation of
 * the buffer. A rule whose word layout cannot count that far is refused at construction.
 */
export const MIN_UPTIME_MS = 315_576_000_000;
/**
 * Times in a buffer count from one day before its creation, so that a thread whose clock reads a
 * little behind the creator's (or a test's clock set back) still decides at its own reading.
 */
export const EPOCH_MARGIN_MS = 86_400_000;
/** Times are counted in plain numbers, so no layout goes past 2^52 ms (142 000 years) of uptime. */
const NUMBER_UPTIME_MS = 2 ** 52;
/** The most permits a shared sliding log keeps per key: its timestamps live in the buffer. */
export const MAX_LOG_LIMIT = 4095;
/** The most keys one buffer holds: 2^27 slots (of 16 bytes: 2 GiB) at 2.5 slots per key. */
export const MAX_KEYS = Math.floor(2 ** 27 / 2.5);

/** The rule and sizes recorded in a buffer's header. */
export interface Header {
  readonly algorithm: SharedAlgorithm;
  readonly limit: number;
  readonly windowMs: number;
  readonly maxKeys: number;
  readonly slots: number;
  readonly ring: number;
  readonly epoch: number;
  /** The key hash's secret, four 32-bit words. */
  readonly secret: Uint32Array;
}

/** Bits of a count from 0 to `limit`. */
export function countBits(limit: number): number {
  return Math.floor(Math.log2(limit)) + 1;
}

/**
 * The last relative millisecond (since the buffer's creation) at which an algorithm's word still
 * decides exactly, for a rule. Every layout is stated in the module that packs it.
 */
export function exactUptimeMs(algorithm: SharedAlgorithm, limit: number, windowMs: number): number {
  let ms: number;
  if (algorithm === 'token-bucket' || algorithm === 'leaky-bucket') {
    // The word is the scaled-unit point at which the bucket is full again: it must hold
    // uptime × perMs + capacity below 2^64.
    const g = BigInt(gcdOf(limit, windowMs));
    const perMs = BigInt(limit) / g;
    const capacity = BigInt(limit) * (BigInt(windowMs) / g);
    const room = (1n << 64n) - 1n - capacity;
    ms = room < 0n ? -1 : Number(room / perMs);
  } else if (algorithm === 'fixed-window') {
    ms = 2 ** (64 - countBits(limit)) * windowMs - 1;
  } else if (algorithm === 'sliding-window-counter') {
    ms = 2 ** (64 - 2 * countBits(limit)) * windowMs - 1;
  } else {
    ms = 2 ** 40 - 1;
  }
  return Math.min(ms, NUMBER_UPTIME_MS);
}

function gcdOf(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/**
 * Checks that a rule fits the algorithm's word for ten years of uptime and returns how long it is
 * exact for; throws a `RangeError` that says what fits otherwise.
 */
export function checkRuleFits(algorithm: SharedAlgorithm, limit: number, windowMs: number): number {
  integerIn('rule.windowMs', windowMs, 1, Rule.MAX_WINDOW_MS);
  const refuse = (why: string) => rangeError(`ratekeeper: Rule(${limit}, ${windowMs}) does not fit a shared ${algorithm}: ${why}`);
  if (algorithm === 'sliding-window-log' && limit > MAX_LOG_LIMIT) {
    throw refuse(`a shared log keeps at most ${MAX_LOG_LIMIT} timestamps per key (use sliding-window-counter or token-bucket)`);
  }
  const uptime = exactUptimeMs(algorithm, limit, windowMs);
  if (uptime < MIN_UPTIME_MS) {
    throw refuse(`its 64-bit word would count only ${Math.max(0, uptime)} ms, less than ten years (see docs/threads.md)`);
  }
  return uptime;
}

/**
 * Slots for `maxKeys` keys: a power of two of at least 2.5 times as many, so at most 40% are taken.
 * A new key is refused while fewer than maxKeys are stored only if the 64 slots from its home are
 * all taken: at 40% that is about 1.6e-11 per insertion, at 50% it would be 7e-8 (key-hash.test.ts).
 */
export function slotsFor(maxKeys: number): number {
  return Math.max(16, 2 ** Math.ceil(Math.log2(2.5 * maxKeys)));
}

/** Timestamps per slot of a shared log: a power of two, so sequence numbers wrap with the ring. */
export function ringFor(algorithm: SharedAlgorithm, limit: number): number {
  return algorithm === 'sliding-window-log' ? 2 ** Math.ceil(Math.log2(limit)) : 0;
}

/** Words of the whole buffer. */
export function wordsFor(slots: number, ring: number): number {
  return HEADER_WORDS + 2 * slots + slots * ring;
}

/** Writes the header of a new buffer. */
export function writeHeader(words: BigUint64Array, header: Header): void {
  words[H.magic] = MAGIC;
  words[H.version] = VERSION;
  words[H.algorithm] = BigInt(ALGORITHMS.indexOf(header.algorithm));
  words[H.limit] = BigInt(header.limit);
  words[H.windowMs] = BigInt(header.windowMs);
  words[H.maxKeys] = BigInt(header.maxKeys);
  words[H.slots] = BigInt(header.slots);
  words[H.ring] = BigInt(header.ring);
  words[H.epoch] = BigInt.asUintN(64, BigInt(header.epoch));
  new Uint32Array(words.buffer, H.secret * 8, 4).set(header.secret);
}

/** Reads the header of a buffer made by `new SharedKeyedRateLimiter`; throws a `TypeError` for anything else. */
export function readHeader(buffer: unknown): { words: BigUint64Array; header: Header } {
  const notOurs = (why: string) => typeError(`ratekeeper: \`buffer\` must be the .buffer of a SharedKeyedRateLimiter, got ${why}`);
  if (typeof SharedArrayBuffer === 'undefined' || !(buffer instanceof SharedArrayBuffer)) throw notOurs(describe(buffer));
  // A length that is no whole number of words would make BigUint64Array throw V8's own RangeError.
  if (buffer.byteLength < HEADER_WORDS * 8 || buffer.byteLength % 8 !== 0) throw notOurs(`a SharedArrayBuffer of ${buffer.byteLength} bytes`);
  const words = new BigUint64Array(buffer);
  if (words[H.magic] !== MAGIC) throw notOurs('a SharedArrayBuffer of something else');
  if (words[H.version] !== VERSION) throw notOurs(`a buffer of layout version ${words[H.version]}, this ratekeeper reads version ${VERSION}`);
  const read = (i: number) => Number(words[i]);
  const header: Header = {
    algorithm: ALGORITHMS[read(H.algorithm)] as SharedAlgorithm,
    limit: read(H.limit),
    windowMs: read(H.windowMs),
    maxKeys: read(H.maxKeys),
    slots: read(H.slots),
    ring: read(H.ring),
    epoch: Number(BigInt.asIntN(64, words[H.epoch] as bigint)),
    secret: new Uint32Array(buffer, H.secret * 8, 4).slice(),
  };
  if (words.length !== wordsFor(header.slots, header.ring)) throw notOurs('a buffer whose size does not match its header');
  return { words, header };
}
