// Type tests: what the compiler tells a user. The `expectTypeOf` and `@ts-expect-error` assertions
// are checked by `tsc --noEmit` (`npm run typecheck`, run by CI before the tests); at run time
// `expectTypeOf` does nothing, and the few runtime checks confirm that the code rejects what the
// types reject.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  FixedWindow,
  KeyedRateLimiter,
  LeakyBucket,
  ManualClock,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  systemClock,
  type AcquireOptions,
  type Allowed,
  type Clock,
  type Decision,
  type DegradedReason,
  type KeyedRateLimiterOptions,
  type RateLimitAlgorithm,
  type RateLimiter,
  type Rejected,
} from '../../src/index';

const rule = Rule.perSecond(4);

describe('Decision', () => {
  it('narrows on `allowed`: an allowed decision has `retryAfterMs: 0`, a refusal a number to wait', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock: new ManualClock() });
    const d = limiter.tryAcquire('k');
    expectTypeOf(d).toEqualTypeOf<Decision>();
    expectTypeOf(d.retryAfterMs).toEqualTypeOf<number>();
    if (d.allowed) {
      expectTypeOf(d).toEqualTypeOf<Allowed>();
      expectTypeOf(d.retryAfterMs).toEqualTypeOf<0>();
    } else {
      expectTypeOf(d).toEqualTypeOf<Rejected>();
      expectTypeOf(d.allowed).toEqualTypeOf<false>();
      expectTypeOf(d.retryAfterMs).toEqualTypeOf<number>();
    }
    expect(d.allowed).toBe(true);
  });

  it('is a closed union of exactly two shapes, read-only, with an optional typed degraded reason', () => {
    expectTypeOf<Decision>().toEqualTypeOf<Allowed | Rejected>();
    expectTypeOf<Decision['allowed']>().toEqualTypeOf<boolean>();
    expectTypeOf<Decision['degraded']>().toEqualTypeOf<DegradedReason | undefined>();
    expectTypeOf<DegradedReason>().toEqualTypeOf<'key-table-full' | 'store-error' | 'store-timeout' | 'queue-full'>();
    expectTypeOf<Allowed>().toEqualTypeOf<{
      readonly allowed: true;
      readonly limit: number;
      readonly remaining: number;
      readonly retryAfterMs: 0;
      readonly resetAfterMs: number;
      readonly degraded?: DegradedReason;
    }>();
    expectTypeOf<Rejected>().toEqualTypeOf<{
      readonly allowed: false;
      readonly limit: number;
      readonly remaining: number;
      readonly retryAfterMs: number;
      readonly resetAfterMs: number;
      readonly degraded?: DegradedReason;
    }>();

    const d = new TokenBucket(rule).tryAcquire(0);
    // @ts-expect-error a decision is a value to read, not to edit
    d.remaining = 10;
    // @ts-expect-error an allowed decision never carries a wait
    const wrong: Allowed = { allowed: true, limit: 1, remaining: 0, retryAfterMs: 5, resetAfterMs: 0 };
    expect(wrong.allowed).toBe(true);
  });
});

describe('the factory lambda', () => {
  it('gets the key as a string and may return any algorithm, without annotations', () => {
    const limiter = new KeyedRateLimiter({
      algorithm: (key) => {
        expectTypeOf(key).toEqualTypeOf<string>();
        return key.startsWith('pro:') ? new SlidingWindowLog(Rule.perMinute(600)) : new TokenBucket(rule);
      },
    });
    expectTypeOf<KeyedRateLimiterOptions['algorithm']>().parameters.toEqualTypeOf<[key: string]>();
    expectTypeOf<KeyedRateLimiterOptions['algorithm']>().returns.toEqualTypeOf<RateLimitAlgorithm>();
    expectTypeOf(limiter).toExtend<RateLimiter>();
    expectTypeOf(limiter.tryAcquire).toBeCallableWith('user-1');
    expectTypeOf(limiter.tryAcquire).toBeCallableWith('user-1', 3);
    expectTypeOf(limiter.tryAcquire).returns.toEqualTypeOf<Decision>();
    expect(limiter.tryAcquire('pro:a').limit).toBe(600);
  });

  it('rejects what is not an algorithm and options that do not exist, at compile time and at run time', () => {
    const compileOnly = () => {
      // @ts-expect-error the factory must build an algorithm, not hand over a rule
      void new KeyedRateLimiter({ algorithm: () => rule });
      // @ts-expect-error a misspelt option is a compile error, not a silent default
      void new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), maxkeys: 10 });
    };
    expect(compileOnly).toBeTypeOf('function');
    // @ts-expect-error the factory is a function, so that every key gets a fresh state
    expect(() => new KeyedRateLimiter({ algorithm: new TokenBucket(rule) })).toThrow(TypeError);
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) });
    // @ts-expect-error keys are strings
    expect(() => limiter.tryAcquire(42)).toThrow(TypeError);
  });
});

describe('waiting', () => {
  it('acquire resolves with a Decision and takes only the documented options', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) });
    expectTypeOf(limiter.acquire).returns.toEqualTypeOf<Promise<Decision>>();
    expectTypeOf(limiter.acquire).toBeCallableWith('k');
    expectTypeOf(limiter.acquire).toBeCallableWith('k', 2, { signal: new AbortController().signal, maxWaitMs: 100 });
    expectTypeOf<AcquireOptions>().toEqualTypeOf<{ signal?: AbortSignal | undefined; maxWaitMs?: number | undefined }>();
    const compileOnly = () => {
      // @ts-expect-error a misspelt option is a compile error
      void limiter.acquire('k', 1, { maxWait: 100 });
    };
    expect(compileOnly).toBeTypeOf('function');
  });
});

describe('algorithms and clocks', () => {
  it('every algorithm class implements RateLimitAlgorithm and is built from a Rule', () => {
    for (const Algorithm of [TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter]) {
      expectTypeOf(Algorithm).constructorParameters.toEqualTypeOf<[rule: Rule]>();
      expectTypeOf(new Algorithm(rule)).toExtend<RateLimitAlgorithm>();
    }
    expectTypeOf(new TokenBucket(rule)).toExtend<RateLimitAlgorithm>();
    expectTypeOf(new LeakyBucket(rule)).toExtend<RateLimitAlgorithm>();
    expectTypeOf(new FixedWindow(rule)).toExtend<RateLimitAlgorithm>();
    expectTypeOf(new SlidingWindowLog(rule)).toExtend<RateLimitAlgorithm>();
    expectTypeOf(new SlidingWindowCounter(rule)).toExtend<RateLimitAlgorithm>();
    expectTypeOf<RateLimitAlgorithm['tryAcquire']>().toEqualTypeOf<(nowMs: number, permits?: number) => Decision>();
    expectTypeOf<RateLimitAlgorithm['isIdle']>().toEqualTypeOf<(nowMs: number) => boolean>();
  });

  it('a Rule comes from its constructor or the per-unit helpers; clocks are anything with now()', () => {
    expectTypeOf(Rule.perSecond).toEqualTypeOf<(limit: number) => Rule>();
    expectTypeOf(Rule.perMinute(1)).toEqualTypeOf<Rule>();
    expectTypeOf(rule.limit).toEqualTypeOf<number>();
    expectTypeOf(systemClock).toEqualTypeOf<Clock>();
    expectTypeOf(new ManualClock()).toExtend<Clock>();
    expectTypeOf({ now: () => 0 }).toExtend<Clock>();
  });
});

describe('options under exactOptionalPropertyTypes', () => {
  it('every optional option of every exported *Options type is written `name?: T | undefined`', () => {
    // test/package compiles a consumer passing undefined for each option known today; this catches
    // an option added later, in any file, before a user does.
    const src = fileURLToPath(new URL('../../src', import.meta.url));
    const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
    const offending: string[] = [];
    let seen = 0;
    for (const file of files) {
      const text = readFileSync(join(src, file), 'utf8');
      for (const block of text.matchAll(/^export interface (\w+Options)\b[^{]*\{\n([\s\S]*?)\n\}/gm)) {
        for (const line of (block[2] as string).split('\n')) {
          if (!/^ {2}(readonly )?\w+\?:/.test(line)) continue;
          seen++;
          if (!line.endsWith('| undefined;')) offending.push(`${file} ${block[1]}: ${line.trim()}`);
        }
      }
    }
    expect(seen).toBeGreaterThan(30);
    expect(offending).toEqual([]);
  });

  it('the options types accept undefined for what is optional', () => {
    const options: KeyedRateLimiterOptions = { algorithm: () => new TokenBucket(rule), clock: undefined, maxKeys: undefined };
    const wait: AcquireOptions = { signal: undefined, maxWaitMs: undefined };
    expect(new KeyedRateLimiter(options).acquire('k', 1, wait)).toBeInstanceOf(Promise);
  });
});

describe('store limiters: rule is a Rule or a function of the key', () => {
  it('a fixed Rule keeps `limiter.rule.limit` typed; a function (unannotated key) types `limiter.rule` as that function', async () => {
    const { RedisRateLimiter } = await import('../../src/redis');
    const { PostgresRateLimiter } = await import('../../src/postgres');
    const client = { evalsha: async () => [], eval: async () => [] };
    const fixed = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: Rule.perSecond(3), onStoreError: 'deny' });
    expectTypeOf(fixed.rule).toEqualTypeOf<Rule>();
    expectTypeOf(fixed.rule.limit).toEqualTypeOf<number>();
    const perKey = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: async (key) => (key.startsWith('pro') ? Rule.perSecond(30) : rule), onStoreError: 'deny', prefix: 'types:' });
    expectTypeOf(perKey.rule).toEqualTypeOf<(key: string) => Promise<Rule>>();
    expectTypeOf(perKey.toJSON().rule).toEqualTypeOf<'per key'>();
    const pg = { query: async () => ({ rows: [] }) };
    const postgres = new PostgresRateLimiter({ client: pg, algorithm: 'fixed-window', rule: (key) => (key === 'a' ? rule : Rule.perMinute(1)), onStoreError: 'allow', name: 'types' });
    expectTypeOf(postgres.rule).toEqualTypeOf<(key: string) => Rule>();
    expect(perKey.rule).toBeTypeOf('function');
  });
});
