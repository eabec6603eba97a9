// src/limiter/sharded-map.ts: the key table's map, which splits into up to 256 maps at 4096 entries.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { ShardedMap, shardOf } from '../../src/limiter/sharded-map';

describe('ShardedMap', () => {
  // Generated operations stay far below the 4096 entries of the split, so each run first adds
  // `filled` keys, then applies the generated operations.
  test.prop([
    fc.integer({ min: 0, max: 9000 }),
    fc.array(fc.tuple(fc.constantFrom('set', 'delete', 'deleteIf'), fc.integer({ min: 0, max: 9000 })), { maxLength: 300, size: 'max' }),
    // Told its most entries, it makes fewer shards (none up to 4096): each answers the same.
    fc.constantFrom(Infinity, 1_000_000, 100_000, 9001, 4096),
  ])(
    'answers get, set, delete, deleteIf and size exactly as a Map, before and after the split, whatever its size bound',
    (filled, ops, mostEntries) => {
      const sharded = new ShardedMap<number>(mostEntries);
      const reference = new Map<string, number>();
      const apply = (op: 'set' | 'delete' | 'deleteIf', n: number, value: number) => {
        const key = `user:${n}`;
        if (op === 'set') {
          sharded.set(key, value);
          reference.set(key, value);
        } else if (op === 'delete') {
          expect(sharded.delete(key)).toBe(reference.delete(key));
        } else {
          // Half the time the value it holds (the entry goes), half the time another (it stays).
          const held = value % 2 === 0 ? reference.get(key) : value;
          const match = reference.has(key) && reference.get(key) === held;
          expect(sharded.deleteIf(key, held as number)).toBe(match);
          if (match) reference.delete(key);
        }
      };
      for (let n = 0; n < filled; n++) apply('set', n, -n);
      ops.forEach(([op, n], i) => apply(op, n, i));
      expect(sharded.size).toBe(reference.size);
      for (let n = 0; n <= 9000; n += 7) expect(sharded.get(`user:${n}`)).toBe(reference.get(`user:${n}`));
      expect(new Map(sharded)).toEqual(reference);
    },
  );

  it('keeps its endless round through the split: every entry comes up once per round, deleted ones never', () => {
    const map = new ShardedMap<number>();
    for (let i = 0; i < 4000; i++) map.set(`k${i}`, i);
    for (let i = 0; i < 100; i++) map.nextEntry(); // the round is under way when the split comes
    for (let i = 4000; i < 10_000; i++) map.set(`k${i}`, i);
    for (let i = 0; i < 10_000; i += 3) map.delete(`k${i}`);
    const seen = new Map<string, number>();
    // A round may start anywhere; two rounds' worth of steps see every live entry, and only live ones.
    for (let i = 0; i < 2 * map.size; i++) {
      const [key] = map.nextEntry() ?? ['none'];
      seen.set(key, (seen.get(key) ?? 0) + 1);
    }
    expect([...seen.keys()].sort()).toEqual([...new Map(map).keys()].sort());
    for (const count of seen.values()) expect(count).toBeLessThanOrEqual(3);
  });

  it('stays a Map through the split, whatever the keys look like', () => {
    // Keys sharing a long prefix, a long suffix, or only their length apart all spread on the hash.
    const shapes = [(i: number) => `tenant:acme:user:${i}`, (i: number) => `${i}:/api/v1/orders`, (i: number) => 'x'.repeat(i % 50) + i];
    for (const shape of shapes) {
      const sharded = new ShardedMap<number>();
      const reference = new Map<string, number>();
      for (let i = 0; i < 60_000; i++) {
        sharded.set(shape(i), i);
        reference.set(shape(i), i);
        if (i % 3 === 0) {
          const gone = shape(i >> 1);
          expect(sharded.delete(gone)).toBe(reference.delete(gone));
        }
      }
      expect(sharded.size).toBe(reference.size);
      for (let i = 0; i < 60_000; i += 11) expect(sharded.get(shape(i))).toBe(reference.get(shape(i)));
      expect(new Map(sharded)).toEqual(reference);
      const round = new Set<string>();
      for (let i = 0; i < sharded.size; i++) round.add((sharded.nextEntry() as [string, number])[0]);
      expect(round.size).toBe(sharded.size);
    }
  });

  it('seeds its hash per map: keys crafted to share a shard of the unkeyed FNV-1a, or of another map, spread over every shard', () => {
    const fnv1a = (key: string) => {
      let hash = 0x811c9dc5;
      for (let i = 0; i < key.length; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
      return hash >>> 24;
    };
    const craft = (inShardZero: (key: string) => boolean) => {
      const keys: string[] = [];
      for (let i = 0; keys.length < 2000; i++) if (inShardZero(`attacker:${i}`)) keys.push(`attacker:${i}`);
      return keys;
    };
    const [one, two] = [new ShardedMap<number>(1_000_000), new ShardedMap<number>(1_000_000)];
    expect(one.seed).not.toBe(two.seed); // one seed per limiter, drawn at random (2^-32 to be equal)
    for (const keys of [craft((key) => fnv1a(key) === 0), craft((key) => shardOf(key, 8, one.seed) === 0)]) {
      const sizes = new Map<number, number>();
      for (const key of keys) sizes.set(shardOf(key, 8, two.seed), (sizes.get(shardOf(key, 8, two.seed)) ?? 0) + 1);
      // 2000 keys over 256 shards: about 8 each; crafted for one shard, 2000 would be in it.
      expect(Math.max(...sizes.values())).toBeLessThan(40);
      expect(sizes.size).toBeGreaterThan(200);
    }
  });

  it('has no next entry when empty', () => {
    const map = new ShardedMap<number>();
    expect(map.nextEntry()).toBeUndefined();
    map.set('a', 1);
    map.delete('a');
    expect(map.nextEntry()).toBeUndefined();
  });
});
