import { describe, expect, it } from 'vitest';
import {
  Composite,
  Concurrency,
  FixedWindow,
  KeyedRateLimiter,
  ManualClock,
  ManualScheduler,
  pace,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  systemScheduler,
  TokenBucket,
  WaitQueue,
} from '../../src/index';
import { addressKey, fastifyRateLimit, honoRateLimit, koaRateLimit, nodeRateLimit, rateLimitHeaders, withRateLimit } from '../../src/http';
import { RedisRateLimiter } from '../../src/redis';
import { expectOutcome, isFiniteNumber, isIntegerIn, isObject, isReading, isString, never, optional, show, twins, VALUES } from './support';
import { rangeError, typeError } from '../../src/core/errors';

// Every public function and constructor not covered by bad-input.test.ts, tried with every value of
// VALUES in each parameter and option in turn, the others valid. Each value either works (when the
// field takes it) or throws a TypeError or RangeError whose message starts with `ratekeeper: ` and
// names the field; and where a limiter is involved, its keys then decide exactly as in a twin that
// never saw the bad call.

type Twins = ReturnType<typeof twins>;

interface Row {
  readonly name: string;
  /** What the error message must contain. */
  readonly field: string | readonly string[];
  readonly accepts: (value: unknown) => boolean;
  /** The call under test, made on `limiter` (and, when the value is accepted, on its twin too). */
  readonly call: (value: unknown, limiter: KeyedRateLimiter, t: Twins) => unknown;
}

const anyNumberAtLeast0 = (v: unknown) => isFiniteNumber(v) && (v as number) >= 0;
/** A wait bound: any number of at least 0, `Infinity` (no bound) included. */
const waitBound = (v: unknown) => v === Infinity || anyNumberAtLeast0(v);
const permitsUpTo3 = isIntegerIn(1, 3);

const limiterRows: Row[] = [
  { name: 'acquire(key)', field: '`key`', accepts: isString, call: (v, l) => l.acquire(v as string, 1) },
  { name: 'acquire(key, permits)', field: '`permits`', accepts: optional(permitsUpTo3), call: (v, l) => l.acquire('q', v as number) },
  { name: 'acquire(key, permits) behind a waiter', field: '`permits`', accepts: optional(permitsUpTo3), call: (v, l, t) => {
    // 'b' is spent: a first caller waits in both twins, and the call under test joins behind it.
    if (l === t.limiter) for (const x of [t.limiter, t.twin]) void x.acquire('b', 1).catch(() => {});
    return l.acquire('b', v as number);
  } },
  { name: 'acquire options', field: 'acquire options', accepts: optional(isObject), call: (v, l) => l.acquire('q', 1, v as never) },
  { name: 'acquire { maxWaitMs }', field: '`maxWaitMs`', accepts: optional(waitBound), call: (v, l) => l.acquire('q', 1, { maxWaitMs: v as number }) },
  { name: 'acquire { signal }', field: '`signal`', accepts: (v) => v === undefined, call: (v, l) => l.acquire('q', 1, { signal: v as AbortSignal }) },
  { name: 'lease(key)', field: '`key`', accepts: isString, call: (v, l) => l.lease(v as string, 1) },
  { name: 'lease(key, permits)', field: '`permits`', accepts: optional(permitsUpTo3), call: (v, l) => l.lease('q', v as number) },
  { name: 'lease options', field: 'acquire options', accepts: optional(isObject), call: (v, l) => l.lease('q', 1, v as never) },
  { name: 'lease { maxWaitMs }', field: '`maxWaitMs`', accepts: optional(waitBound), call: (v, l) => l.lease('q', 1, { maxWaitMs: v as number }) },
  { name: 'lease { signal }', field: '`signal`', accepts: (v) => v === undefined, call: (v, l) => l.lease('q', 1, { signal: v as AbortSignal }) },
  { name: 'reconfigure(algorithm)', field: '`algorithm`', accepts: never, call: (v, l) => l.reconfigure(v as never) },
  { name: 'evictIdle(nowMs)', field: '`nowMs`', accepts: optional(isFiniteNumber), call: (v, l) => l.evictIdle(v as number) },
  {
    name: 'pace(fn, options).limiter',
    field: '`limiter`',
    accepts: never,
    call: (v) => pace(async () => 1, { limiter: v as never, key: 'q' }),
  },
  { name: 'pace key', field: '`key`', accepts: isString, call: (v, l) => pace(async () => 1, { limiter: l, key: v as string }) },
  { name: 'pace permits', field: '`permits`', accepts: optional(isIntegerIn(1, Number.MAX_SAFE_INTEGER)), call: (v, l) => pace(async () => 1, { limiter: l, key: 'q', permits: v as number }) },
  { name: 'pace signal', field: '`signal`', accepts: (v) => v === undefined, call: (v, l) => pace(async () => 1, { limiter: l, key: 'q', signal: v as AbortSignal }) },
  { name: 'pace maxWaitMs', field: '`maxWaitMs`', accepts: optional(waitBound), call: (v, l) => pace(async () => 1, { limiter: l, key: 'q', maxWaitMs: v as number }) },
  { name: 'pace options', field: ['pace options', '`limiter`'], accepts: never, call: (v) => pace(async () => 1, v as never) },
  { name: 'pace fn', field: '`fn`', accepts: never, call: (v, l) => pace(v as never, { limiter: l, key: 'q' }) },
  {
    name: 'a paced call whose permits function returns the value',
    field: '`permits`',
    accepts: optional(permitsUpTo3), // a function that returns undefined asks for the default, 1
    call: (v, l) => pace(async () => 1, { limiter: l, key: 'q', permits: () => v as number })(),
  },
  {
    name: 'a paced call whose key function returns the value',
    field: '`key`',
    accepts: isString,
    call: (v, l) => pace(async () => 1, { limiter: l, key: () => v as string })(),
  },
  { name: 'KeyedRateLimiter { maxKeys }', field: '`maxKeys`', accepts: optional((v) => v === Infinity || isIntegerIn(1, Number.MAX_SAFE_INTEGER)(v)), call: (v) => new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), maxKeys: v as number }) },
  { name: 'KeyedRateLimiter { clock }', field: '`clock`', accepts: (v) => v === undefined, call: (v) => new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: v as never }) },
  { name: 'KeyedRateLimiter { algorithm }', field: '`algorithm`', accepts: never, call: (v) => new KeyedRateLimiter({ algorithm: v as never }) },
  { name: 'KeyedRateLimiter options', field: ['KeyedRateLimiter options', '`algorithm`'], accepts: never, call: (v) => new KeyedRateLimiter(v as never) },
  {
    name: 'a factory that returns the value for a new key',
    field: '`algorithm`',
    accepts: never,
    call: (v, l) => {
      l.reconfigure(() => v as never);
      try {
        return l.tryAcquire('new-key');
      } finally {
        l.reconfigure((key) => (key.startsWith('c') ? new Composite([new TokenBucket(new Rule(3, 1000)), new SlidingWindowLog(new Rule(5, 10_000))]) : new TokenBucket(new Rule(3, 1000))));
      }
    },
  },
  { name: 'a clock reading', field: '`nowMs`', accepts: isReading, call: (v) => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: { now: () => v as number } });
    return limiter.tryAcquire('k');
  } },
  ...(['TokenBucket', 'FixedWindow', 'SlidingWindowLog', 'SlidingWindowCounter', 'Composite'] as const).map((name): Row => ({
    name: `new ${name}(rule)`,
    field: name === 'Composite' ? '`parts' : '`rule`',
    accepts: never,
    call: (v) => {
      if (name === 'Composite') return new Composite(v as never);
      const Algorithm = { TokenBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter }[name];
      return new Algorithm(v as Rule);
    },
  })),
  { name: 'Composite parts[1]', field: '`parts[1]`', accepts: never, call: (v) => new Composite([new TokenBucket(Rule.perSecond(1)), v as never]) },
  { name: 'new Concurrency(limit)', field: '`limit`', accepts: isIntegerIn(1, Number.MAX_SAFE_INTEGER), call: (v) => new Concurrency(v as number) },
  { name: 'new Concurrency(2, { leaseMs })', field: '`leaseMs`', accepts: optional((v) => v === Infinity || isIntegerIn(1, 2 ** 42)(v)), call: (v) => new Concurrency(2, { leaseMs: v as number }) },
  { name: 'new Concurrency(2, options)', field: 'Concurrency options', accepts: optional(isObject), call: (v) => new Concurrency(2, v as never) },
  { name: 'a lease extended by ms', field: '`ms`', accepts: (v) => v === Infinity || isIntegerIn(1, 2 ** 42)(v), call: (v) => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new Concurrency(1) });
    return limiter.lease('k').then((lease) => lease.extend(v as number));
  } },
];

describe('limiter, waiting, pacing and composites: every parameter under every bad value', () => {
  it.each(limiterRows)('$name', async ({ field, accepts, call }) => {
    for (const value of VALUES) {
      const t = twins();
      const ok = accepts(value);
      await expectOutcome(() => call(value, t.limiter, t), ok, field).catch((error: unknown) => {
        throw new Error(`with ${show(value)}: ${String(error)}`);
      });
      if (ok) {
        const result = call(value, t.twin, t);
        if (result instanceof Promise) result.catch(() => {});
      }
      await t.same();
    }
  });
});

describe('Composite calls under bad values spend nothing in any part', () => {
  const pair = () => {
    const make = () => new Composite([new TokenBucket(new Rule(3, 1000)), new SlidingWindowLog(new Rule(5, 10_000))]);
    const [c, twin] = [make(), make()];
    for (const x of [c, twin]) x.tryAcquire(1_000, 2);
    return { c, twin };
  };
  it.each<[string, string, (v: unknown, c: Composite) => unknown, (v: unknown) => boolean]>([
    ['tryAcquire(nowMs)', '`nowMs`', (v, c) => c.tryAcquire(v as number), isFiniteNumber],
    ['tryAcquire(now, permits)', '`permits`', (v, c) => c.tryAcquire(1_000, v as number), optional(permitsUpTo3)],
    ['peek(nowMs)', '`nowMs`', (v, c) => c.peek(v as number), isFiniteNumber],
    // peek alone takes 0 permits: the state now.
    ['peek(now, permits)', '`permits`', (v, c) => c.peek(1_000, v as number), optional(isIntegerIn(0, 3))],
  ])('%s', async (_, field, call, accepts) => {
    for (const value of VALUES) {
      const { c, twin } = pair();
      const ok = accepts(value);
      await expectOutcome(() => call(value, c), ok, field);
      if (ok) call(value, twin);
      for (const now of [1_000, 1_333, 2_000, 11_000]) expect(c.tryAcquire(now)).toStrictEqual(twin.tryAcquire(now));
    }
  });
});

describe('ManualClock, ManualScheduler and WaitQueue: a refused value moves no time and queues nothing', () => {
  it.each<[string, string, (v: unknown, clock: ManualScheduler) => unknown, (v: unknown) => boolean]>([
    ['new ManualClock(startMs)', '`startMs`', (v) => new ManualClock(v as number), optional(isFiniteNumber)],
    ['ManualClock#advance(ms)', '`ms`', (v) => new ManualClock(5).advance(v as number), anyNumberAtLeast0],
    ['ManualClock#set(ms)', '`ms`', (v) => new ManualClock(5).set(v as number), isFiniteNumber],
    ['new ManualScheduler(startMs)', '`startMs`', (v) => new ManualScheduler(v as number), optional(isFiniteNumber)],
    ['ManualScheduler#advance(ms)', '`ms`', (v, s) => s.advance(v as number), anyNumberAtLeast0],
    ['ManualScheduler#advanceAsync(ms)', '`ms`', (v, s) => s.advanceAsync(v as number), anyNumberAtLeast0],
    ['new WaitQueue(attempt)', '`attempt`', (v) => new WaitQueue(v as never), never],
    ['new WaitQueue(attempt, scheduler)', '`scheduler`', (v) => new WaitQueue(() => ({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1 }), v as never), (v) => v === undefined],
    ['WaitQueue#acquire(key)', '`key`', (v, s) => queueOn(s).acquire(v as string), isString],
    ['WaitQueue#acquire(key, permits)', '`permits`', (v, s) => queueOn(s).acquire('k', v as number), optional(isIntegerIn(1, Number.MAX_SAFE_INTEGER))],
    ['WaitQueue#acquire options', 'acquire options', (v, s) => queueOn(s).acquire('k', 1, v as never), optional(isObject)],
    ['WaitQueue#acquire { maxWaitMs }', '`maxWaitMs`', (v, s) => queueOn(s).acquire('k', 1, { maxWaitMs: v as number }), optional(waitBound)],
  ])('%s', async (_, field, call, accepts) => {
    for (const value of VALUES) {
      const scheduler = new ManualScheduler(5);
      const ok = accepts(value);
      await expectOutcome(() => call(value, scheduler), ok, field);
      if (!ok) {
        expect(scheduler.now()).toBe(5);
        expect(scheduler.pending).toBe(0);
      }
    }
  });
});

/** A queue over a store that grants everything. */
function queueOn(scheduler: ManualScheduler): WaitQueue {
  return new WaitQueue(() => Promise.resolve({ allowed: true, limit: 9, remaining: 8, retryAfterMs: 0, resetAfterMs: 1 }), scheduler);
}

describe('RedisRateLimiter: options and calls under bad values; a refused call sends nothing', () => {
  const sent: string[][] = [];
  // The documented adapter shape over no server: it records what would be sent and fails, so the
  // outage policy ('allow') answers at once.
  const client = {
    evalsha: async (_sha1: string, keys: string[], args: string[]) => {
      sent.push([...keys, ...args]);
      throw new Error('no server here');
    },
    eval: async () => {
      throw new Error('no server here');
    },
  };
  const base = { client, algorithm: 'token-bucket', rule: new Rule(3, 1000), onStoreError: 'allow' } as const;
  const make = (extra: object) => new RedisRateLimiter({ ...base, ...extra } as never);

  it.each<[string, string, (v: unknown) => boolean]>([
    ['client', '`client`', never],
    ['algorithm', '`algorithm`', never],
    ['rule', '`', never], // a non-object names `rule`; an object is read as a Rule and names `limit`
    ['onStoreError', '`onStoreError`', never],
    ['prefix', '`prefix`', optional(isString)],
    ['name', '`name`', optional((v) => isString(v) && v !== '')],
    ['clock', '`clock`', (v) => v === undefined],
    ['timeoutMs', '`timeoutMs`', optional((v) => v === Infinity || isIntegerIn(1, 2 ** 31 - 1)(v))],
    ['onError', '`onError`', (v) => v === undefined],
    ['refusalCache', '`refusalCache', optional((v) => typeof v === 'boolean' || (isObject(v) && !Array.isArray(v)))],
    ['batch', '`batch`', optional((v) => typeof v === 'boolean')],
  ])('option %s', async (option, field, accepts) => {
    for (const value of VALUES) {
      await expectOutcome(() => make({ [option]: value }), accepts(value), field);
    }
    await expectOutcome(() => new RedisRateLimiter(undefined as never), false, 'RedisRateLimiter options');
  });

  it.each<[string, string, (v: unknown, l: RedisRateLimiter) => Promise<unknown>, (v: unknown) => boolean]>([
    ['tryAcquire(key)', '`key`', (v, l) => l.tryAcquire(v as string), isString],
    ['tryAcquire(key, permits)', '`permits`', (v, l) => l.tryAcquire('k', v as number), optional(permitsUpTo3)],
    ['acquire(key)', '`key`', (v, l) => l.acquire(v as string), isString],
    ['acquire(key, permits)', '`permits`', (v, l) => l.acquire('k', v as number), optional(permitsUpTo3)],
    ['acquire options', 'acquire options', (v, l) => l.acquire('k', 1, v as never), optional(isObject)],
    ['acquire { maxWaitMs }', '`maxWaitMs`', (v, l) => l.acquire('k', 1, { maxWaitMs: v as number }), optional(waitBound)],
    ['acquire { signal }', '`signal`', (v, l) => l.acquire('k', 1, { signal: v as AbortSignal }), (v) => v === undefined],
  ])('%s', async (_, field, call, accepts) => {
    const limiter = make({});
    for (const value of VALUES) {
      sent.length = 0;
      const ok = accepts(value);
      await expectOutcome(() => call(value, limiter), ok, field);
      expect(sent.length).toBe(ok ? 1 : 0);
    }
  });
});

describe('ratekeeper/http: every adapter option and every rateLimitHeaders input under bad values', () => {
  const t = twins();
  const adapters: [string, (options: object) => unknown][] = [
    ['nodeRateLimit', (o) => nodeRateLimit(o as never)],
    ['fastifyRateLimit', (o) => fastifyRateLimit(o as never)],
    ['honoRateLimit', (o) => honoRateLimit(o as never)],
    ['koaRateLimit', (o) => koaRateLimit(o as never)],
    ['withRateLimit', (o) => withRateLimit(o as never, () => new Response())],
  ];
  const printable = (v: unknown) => typeof v === 'string' && /^[\x20-\x7e]+$/.test(v);
  const options: [string, (v: unknown) => boolean, string[]?][] = [
    ['limiter', never],
    ['key', (v) => v === undefined],
    ['cost', (v) => v === undefined],
    ['skip', (v) => v === undefined],
    ['headers', optional((v) => v === false || ['draft-10', 'draft-7', 'draft-6', 'x-ratelimit'].includes(v as string))],
    ['name', optional(printable)],
    ['windowMs', optional((v) => isFiniteNumber(v) && (v as number) > 0)],
    ['trustProxies', optional(isIntegerIn(0, 16))],
    ['forwardedHeader', (v) => v === undefined],
    ['countPreflight', optional((v) => typeof v === 'boolean')],
    ['onRejected', (v) => v === undefined],
    ['clientAddress', (v) => v === undefined, ['honoRateLimit', 'withRateLimit']],
  ];
  const cases = adapters.flatMap(([adapter, build]) =>
    options.filter(([, , only]) => only === undefined || only.includes(adapter)).map(([option, accepts]) => ({ adapter, build, option, accepts })),
  );

  it.each(cases)('$adapter { $option }', async ({ adapter, build, option, accepts }) => {
    for (const value of VALUES) await expectOutcome(() => build({ limiter: t.limiter, [option]: value }), accepts(value), `\`${option}\``);
    for (const value of VALUES.filter((v) => !isObject(v))) await expectOutcome(() => build(value as never), false, `${adapter} options`);
  });

  it.each<[string, string | string[], (v: unknown) => object, (v: unknown) => boolean]>([
    ['key returns the value', '`key`', (v) => ({ key: () => v }), isString],
    ['key resolves to the value', '`key`', (v) => ({ key: async () => v }), isString],
    ['cost returns the value', ['`cost`', '`permits`'], (v) => ({ key: () => 'q', cost: () => v }), permitsUpTo3], // above the limit, the limiter names `permits`
  ])('a request whose %s: refused by name, and the shared limiter is untouched', async (_, field, callbacks, accepts) => {
    for (const value of VALUES) {
      const pair = twins();
      const handle = (limiter: KeyedRateLimiter) => withRateLimit({ limiter, ...callbacks(value) }, () => new Response('ok'))(new Request('http://api.test/'));
      const ok = accepts(value);
      const error = await expectOutcome(() => handle(pair.limiter), ok, field);
      if (error === undefined) await handle(pair.twin);
      await pair.same();
    }
  });

  const allowed = { allowed: true, limit: 10, remaining: 3, retryAfterMs: 0, resetAfterMs: 1500 } as const;
  const refused = { allowed: false, limit: 10, remaining: 0, retryAfterMs: 250, resetAfterMs: 1500 } as const;
  const amount = (v: unknown) => isFiniteNumber(v) && (v as number) >= 0;
  it.each<[string, string | string[], (v: unknown) => unknown, (v: unknown) => boolean]>([
    // An object is read and its first bad field named; an array is a list of policies.
    ['the decision', ['`decision', '`policies'], (v) => rateLimitHeaders(v as never), never],
    ['decision.allowed', '`decision.allowed`', (v) => rateLimitHeaders({ ...refused, allowed: v } as never), (v) => typeof v === 'boolean'],
    ['decision.limit', '`decision.limit`', (v) => rateLimitHeaders({ ...allowed, limit: v } as never), amount],
    ['decision.remaining', '`decision.remaining`', (v) => rateLimitHeaders({ ...allowed, remaining: v } as never), amount],
    ['decision.retryAfterMs (refused)', '`decision.retryAfterMs`', (v) => rateLimitHeaders({ ...refused, retryAfterMs: v } as never), amount],
    ['decision.resetAfterMs (allowed)', '`decision.resetAfterMs`', (v) => rateLimitHeaders({ ...allowed, resetAfterMs: v } as never), amount],
    ['options', 'rateLimitHeaders options', (v) => rateLimitHeaders(allowed, v as never), optional(isObject)],
    // null asks for the default format and name, as undefined does
    ['options.format', '`format`', (v) => rateLimitHeaders(allowed, { format: v as never }), (v) => v == null],
    ['options.name', '`name`', (v) => rateLimitHeaders(allowed, { name: v as string }), (v) => v == null || printable(v)],
    ['options.windowMs', '`windowMs`', (v) => rateLimitHeaders(allowed, { windowMs: v as number }), optional((v) => isFiniteNumber(v) && (v as number) > 0)],
    ['a policy', '`policies[0]', (v) => rateLimitHeaders([v] as never), never],
    ['a policy name', '`policies[1].name`', (v) => rateLimitHeaders([{ decision: allowed, name: 'a' }, { decision: refused, name: v as string }]), (v) => printable(v) && v !== 'a'],
    ['a policy window', '`policies[0].windowMs`', (v) => rateLimitHeaders([{ decision: allowed, name: 'a', windowMs: v as number }]), optional((v) => isFiniteNumber(v) && (v as number) > 0)],
    ['a policy decision.remaining', '`policies[0].decision.remaining`', (v) => rateLimitHeaders([{ decision: { ...allowed, remaining: v as number }, name: 'a' }]), amount],
  ])('rateLimitHeaders: %s', async (_, field, call, accepts) => {
    for (const value of VALUES) {
      await expectOutcome(() => {
        const headers = call(value) as Record<string, string>;
        // Whatever it takes, it writes only integers and quoted names: no NaN, no exponent, no "undefined".
        for (const text of Object.values(headers)) expect(text).not.toMatch(/NaN|Infinity|undefined|e\+|\d\.\d/);
      }, accepts(value), field);
    }
  });

  it('addressKey takes any string (a 1 MB one included) and refuses anything else, naming `address`', async () => {
    for (const value of VALUES) {
      await expectOutcome(() => expect(typeof addressKey(value as string)).toBe('string'), isString(value), '`address`');
    }
  });
});

describe('fixes found by the table', () => {
  it('evictIdle(Infinity) is refused: at Infinity every key is idle, and active keys would be forgiven', () => {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: new ManualClock(1_000) });
    limiter.tryAcquire('a', 2);
    expect(() => limiter.evictIdle(Infinity)).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got Infinity'));
    expect(limiter.size).toBe(1);
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: false, retryAfterMs: 500 });
  });

  it('a clock reading that is a numeric string is refused and never becomes the latest reading', () => {
    let reading: unknown = 5e15;
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)), clock: { now: () => reading as number } });
    limiter.tryAcquire('a', 2);
    reading = '9e15';
    expect(() => limiter.tryAcquire('a')).toThrow(typeError('ratekeeper: `nowMs` must be a number, got "9e15"'));
    reading = 5e15 + 500; // before the fix, every later call was held to the string and threw
    expect(limiter.tryAcquire('a')).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('a factory that makes no algorithm is refused by name for the new key, and cannot break the sweep of another key', () => {
    const made = { tryAcquire: () => ({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0 }) }; // no isIdle
    const limiter = new KeyedRateLimiter({ algorithm: (key) => (key === 'odd' ? (made as never) : new TokenBucket(Rule.perSecond(1))), clock: new ManualClock(), maxKeys: 2 });
    limiter.tryAcquire('a');
    expect(() => limiter.tryAcquire('odd')).toThrow(typeError('ratekeeper: `algorithm` must return an algorithm, got an object'));
    expect(limiter.size).toBe(1);
    expect(limiter.tryAcquire('b')).toMatchObject({ allowed: true });
    expect(limiter.tryAcquire('c')).toMatchObject({ allowed: false, degraded: 'key-table-full' });
  });

  it.each<[string, (answer: unknown) => unknown]>([
    ['synchronously', (answer) => answer],
    ['in a promise', (answer) => Promise.resolve(answer)],
  ])('a WaitQueue whose attempt answers no Decision %s rejects the caller by name and frees the line', async (_, wrap) => {
    const scheduler = new ManualScheduler();
    for (const answer of [undefined, null, 7, {}, { allowed: 'yes' }, { allowed: false }, { allowed: false, retryAfterMs: Number.NaN }]) {
      let next: unknown = answer;
      const queue = new WaitQueue(() => wrap(next) as never, scheduler);
      await expect(queue.acquire('k')).rejects.toThrow(/^ratekeeper: `attempt` must return a Decision/);
      expect(queue.has('k')).toBe(false);
      expect(scheduler.pending).toBe(0); // before the fix: a line stuck for ever, or a 1 ms timer re-armed for ever
      next = { allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1 };
      await expect(queue.acquire('k')).resolves.toMatchObject({ allowed: true });
    }
  });

  it('a composite refused at a time too large to add a wait to answers at once (it used to loop for ever)', () => {
    const c = new Composite([new TokenBucket(new Rule(3, 1000)), new SlidingWindowLog(new Rule(5, 10_000))]);
    c.tryAcquire(1e308, 3);
    expect(c.tryAcquire(1e308)).toMatchObject({ allowed: false, retryAfterMs: expect.any(Number) });
  });

  it('a thenable whose then() throws rejects the caller and frees the line', async () => {
    const queue = new WaitQueue(() => ({ then: () => { throw new RangeError('ratekeeper: `store` broke'); } }) as never, systemScheduler);
    await expect(queue.acquire('k')).rejects.toThrow('ratekeeper: `store` broke');
    expect(queue.has('k')).toBe(false);
  });
});
