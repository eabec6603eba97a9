// Attacks on the shared key table, and the states a worker stopped mid-call (worker.terminate())
// leaves in the buffer, forged word by word rather than raced: a race would find them only
// sometimes. Only the public API and the buffer's documented layout (docs/threads.md) are used.
import { describe, expect, it } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { SharedKeyedRateLimiter } from '../../src/shared';
import { craftedKeys } from './crafted-keys';

/** Header words (docs/threads.md, "How it works"). */
const SLOTS = 6;
const SIZE = 10;
const HEADER_WORDS = 16;
const PENDING = 1n << 63n;
/** A slot given up: no key. */
const FREE = 1n << 62n;

/** The key words of every slot that holds a key or a claim. */
function keyWords(buffer: SharedArrayBuffer): { index: number; word: bigint }[] {
  const words = new BigUint64Array(buffer);
  const found: { index: number; word: bigint }[] = [];
  for (let i = HEADER_WORDS; i < HEADER_WORDS + 2 * Number(words[SLOTS]); i += 2) {
    if (words[i] !== 0n && words[i] !== FREE) found.push({ index: i, word: words[i] as bigint });
  }
  return found;
}

describe('keys crafted without the secret', () => {
  it("70 keys crafted to share alice's home slot, each spent out, leave her a slot: the table hashes under its own secret", () => {
    const clock = new ManualClock(0);
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perMinute(5), maxKeys: 1000, clock });
    const victim = 'alice|203.0.113.7';
    const slots = Number(new BigUint64Array(limiter.buffer)[SLOTS]);
    // Each spent out, so active: no slot of theirs may be given away.
    for (const key of craftedKeys(victim, slots, 70)) for (let i = 0; i < 5; i++) limiter.tryAcquire(key);
    expect(limiter.tryAcquire(victim)).toEqual({ allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 12_000 });
    expect(limiter.size).toBe(71);
  });
});

describe('a worker stopped mid-call leaves nothing that holds room for ever', () => {
  it('a key count raised for a slot never taken (stopped between counting and claiming) is healed once it has stood still a second', () => {
    const clock = new ManualClock(0);
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(4), maxKeys: 1, clock });
    new BigUint64Array(limiter.buffer)[SIZE] = 1n; // counted, and the thread was stopped before its claim
    expect(limiter.size).toBe(1);
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    clock.advance(999);
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    clock.advance(1001);
    expect(limiter.tryAcquire('a')).toEqual({ allowed: true, limit: 4, remaining: 3, retryAfterMs: 0, resetAfterMs: 250 });
    expect(limiter.size).toBe(1);
    expect(keyWords(limiter.buffer)).toHaveLength(1);
    // A table full of a real key is not "healed": the count stands for what the table holds.
    clock.advance(5000);
    limiter.tryAcquire('a', 4);
    expect(limiter.tryAcquire('b')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    clock.advance(2000);
    limiter.tryAcquire('a', 4); // active again
    expect(limiter.tryAcquire('b')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    expect(limiter.size).toBe(1);
  });

  it('a claim left half-made (never committed nor withdrawn) is finished by the next thread that needs room there', () => {
    const clock = new ManualClock(0);
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(4), maxKeys: 1, clock });
    const other = SharedKeyedRateLimiter.attach(limiter.buffer, { clock });
    other.tryAcquire('ghost');
    const [ghost] = keyWords(limiter.buffer);
    new BigUint64Array(limiter.buffer)[ghost?.index as number] = (ghost?.word as bigint) | PENDING; // its thread stopped mid-claim
    clock.advance(250); // the ghost's state is idle
    expect(limiter.tryAcquire('new')).toEqual({ allowed: true, limit: 4, remaining: 3, retryAfterMs: 0, resetAfterMs: 250 });
    expect(limiter.size).toBe(1);
    expect(keyWords(limiter.buffer).every(({ word }) => (word & PENDING) === 0n)).toBe(true);
  });
});

describe('a refusal writes nothing', () => {
  it("a handle whose last key's slot was given away refuses without spending the new key's permit", () => {
    const clock = new ManualClock(0);
    const a = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perSecond(3), maxKeys: 1, clock });
    const b = SharedKeyedRateLimiter.attach(a.buffer, { clock });
    // Until b's new key lands in the very slot a remembers for its last key (1 key in 16 has that home).
    let second = '';
    for (let i = 0; second === ''; i++) {
      expect(a.tryAcquire('first').allowed).toBe(true);
      const [first] = keyWords(a.buffer);
      clock.advance(1000); // 'first' is idle: its slot may go
      expect(b.tryAcquire(`second-${i}`).remaining).toBe(2);
      if (keyWords(a.buffer)[0]?.index === first?.index) second = `second-${i}`;
      else clock.advance(1000);
    }
    const before = b.peek(second);
    expect(a.tryAcquire('first')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
    expect(b.peek(second)).toEqual(before);
    expect(b.tryAcquire(second).remaining).toBe(1);
  });
});

describe('peek of a new key at a full table', () => {
  it('deep-equals tryAcquire: refused as key-table-full, not a grant of a count that would not be kept', () => {
    const clock = new ManualClock(0);
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'sliding-window-log', rule: new Rule(3, 60_000), maxKeys: 2, clock });
    limiter.tryAcquire('a');
    limiter.tryAcquire('b');
    for (const permits of [1, 3]) {
      const peeked = limiter.peek('victim', permits);
      expect(peeked).toMatchObject({ allowed: false, remaining: 0, degraded: 'key-table-full' });
      expect(peeked).toEqual(limiter.tryAcquire('victim', permits));
    }
    clock.advance(60_000); // 'a' and 'b' are idle: the victim finds room, and peek says so
    expect(limiter.peek('victim')).toEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 60_000 });
    expect(limiter.peek('victim')).toEqual(limiter.tryAcquire('victim'));
  });
});
