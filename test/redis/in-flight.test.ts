import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { Concurrency, ManualClock, ManualScheduler, Rule } from '../../src/index';
import { nodeRateLimit } from '../../src/http';
import { RedisRateLimiter } from '../../src/redis';
import { leasePlan, plans } from '../../src/redis/scripts';
import { chargedAhead, extendedAhead, type MakeLimiter } from '../support/clocks-ahead';
import { blockProvesTheWait, type CountedLimiter, onlyInFlightWaits, rateProvesTheWait } from '../support/lease-proven-wait';
import { nextMessage, raceFour, startRacer } from '../support/lease-race';
import { ioredisClient, redisPort, uniquePrefix, useIoredis } from './helpers/clients';
import { countingClient } from './helpers/counting-client';

// Issue 25 over Redis (DESIGN-25 S4): in-flight limits across processes, a killed holder, and the
// option's checks. The twin equality is in-flight.property.test.ts.

const racer = fileURLToPath(new URL('./fixtures/lease-racer.ts', import.meta.url));

function serverMs(time: unknown): number {
  const [seconds, micros] = time as string[];
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

describe.skipIf(!redisPort)('in-flight limits across processes', () => {
  for (const client of ['ioredis', 'node-redis']) {
    test(`${client}: four processes leasing one key never hold more than the limit together`, { timeout: 60_000 }, async () => {
      const limit = 3;
      const tasks = 25;
      const prefix = uniquePrefix('lease-race');
      const reports = await raceFour(racer, [String(redisPort), prefix, client, String(limit), '30000', String(tasks)]);
      // Every task was granted in turn, and at no moment did more than `limit` count themselves in.
      expect(reports.map((report) => report.granted)).toEqual([tasks, tasks, tasks, tasks]);
      expect(Math.max(...reports.map((report) => report.most))).toBeLessThanOrEqual(limit);
    });

    test(`${client}: a SIGKILLed holder's permit comes back when its lease ends, by the server's clock`, { timeout: 30_000 }, async () => {
      const leaseMs = 1500;
      const prefix = uniquePrefix('lease-kill');
      const holder = startRacer(racer, [String(redisPort), prefix, client, '1', String(leaseMs), '1']);
      let report: { granted: boolean; serverMs: number };
      try {
        await nextMessage(holder);
        const held = nextMessage(holder);
        holder.send('hold');
        report = (await held) as { granted: boolean; serverMs: number };
      } finally {
        holder.kill('SIGKILL');
      }
      const { granted, serverMs: grantedBy } = report;
      expect(granted).toBe(true);
      const redis = ioredisClient();
      try {
        const limiter = new RedisRateLimiter({
          client: redis,
          algorithm: 'token-bucket',
          rule: new Rule(1_000_000, 1000),
          concurrency: new Concurrency(1, { leaseMs }),
          onStoreError: 'deny',
          prefix,
          timeoutMs: 10_000,
        });
        // Still held by the dead process: refused, with the lease's end as the retry's bound.
        const refused = await limiter.reserve('shared');
        expect(refused.decision.allowed).toBe(false);
        expect(refused.decision.retryAfterMs).toBeLessThanOrEqual(leaseMs);
        const lease = await limiter.lease('shared', 1, { maxWaitMs: 20_000 });
        const now = serverMs(await redis.call('TIME'));
        expect(lease.decision.allowed).toBe(true);
        // Granted only once the lease had ended (its end is at most grantedBy + leaseMs), and soon after:
        // within the re-check of 100 ms, with room for a loaded machine's round trips.
        expect(now).toBeGreaterThanOrEqual(grantedBy - 1000 + leaseMs);
        expect(now - grantedBy).toBeLessThanOrEqual(leaseMs + 2000);
        await lease.settle(1);
      } finally {
        redis.disconnect();
      }
    });
  }
});

describe('the concurrency option', () => {
  const client = useIoredis(); // never connects: every call here is refused before it is sent
  const base = { client, onStoreError: 'deny' as const };

  test('a store cannot keep a lease for ever, nor more than 4096 in flight', () => {
    expect(() => new RedisRateLimiter({ ...base, concurrency: new Concurrency(2, { leaseMs: Infinity }) })).toThrow(
      expect.objectContaining({ name: 'RangeError', code: 'ERR_RATEKEEPER_OUT_OF_RANGE', message: expect.stringContaining('`concurrency.leaseMs`') }),
    );
    expect(() => new RedisRateLimiter({ ...base, concurrency: new Concurrency(4097) })).toThrow(expect.objectContaining({ name: 'RangeError', message: expect.stringContaining('`concurrency.limit`') }));
    expect(() => new RedisRateLimiter({ ...base, concurrency: { limit: 2, leaseMs: 1000 } as unknown as Concurrency })).toThrow(
      expect.objectContaining({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT', message: expect.stringContaining('`concurrency` must be a Concurrency') }),
    );
    // An algorithm without its rule is still a missing rule.
    expect(() => new RedisRateLimiter({ ...base, algorithm: 'token-bucket', concurrency: new Concurrency(2) } as never)).toThrow(expect.objectContaining({ name: 'TypeError', message: expect.stringContaining('`rule`') }));
  });

  test('reads back as given, and shows in toJSON', () => {
    const concurrency = new Concurrency(2, { leaseMs: 30_000 });
    const both = new RedisRateLimiter({ ...base, algorithm: 'token-bucket', rule: Rule.perMinute(100), concurrency, prefix: 'json:' });
    const alone = new RedisRateLimiter({ ...base, concurrency, name: 'uploads' });
    expect(both.concurrency).toBe(concurrency);
    expect(JSON.parse(JSON.stringify(both))).toEqual({ algorithm: 'token-bucket', rule: { limit: 100, windowMs: 60_000 }, prefix: 'json:', timeoutMs: 500, concurrency: { algorithm: 'concurrency', limit: 2, leaseMs: 30_000 } });
    expect(JSON.parse(JSON.stringify(alone))).toMatchObject({ algorithm: 'concurrency', name: 'uploads', concurrency: { limit: 2, leaseMs: 30_000 } });
    expect(new RedisRateLimiter({ ...base, algorithm: 'token-bucket', rule: Rule.perMinute(100), prefix: 'plain:' }).concurrency).toBeUndefined();
  });

  test('tryAcquire, charge and acquire reject: nobody could release their grant', async () => {
    const limiter = new RedisRateLimiter({ ...base, algorithm: 'fixed-window', rule: Rule.perMinute(100), concurrency: new Concurrency(2) });
    const invalid = expect.objectContaining({ name: 'TypeError', code: 'ERR_RATEKEEPER_INVALID_ARGUMENT' });
    await expect(limiter.tryAcquire('k')).rejects.toEqual(invalid);
    await expect(limiter.charge('k', 1)).rejects.toEqual(invalid);
    await expect(limiter.acquire('k')).rejects.toEqual(invalid);
  });

  test('a limiter without concurrency runs the script it ran before: the lease code is in the leased scripts only', () => {
    for (const plan of Object.values(plans)) expect(plan.script.source).not.toMatch(/inflight|OPERATIONS\.extend/);
    for (const algorithm of ['token-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter', undefined] as const) expect(leasePlan(algorithm).script.source).toMatch(/OPERATIONS\.extend/);
  });
});

describe.skipIf(!redisPort)('leases over Redis', () => {
  const client = useIoredis();

  test("a release through this process's limiter wakes its waiting lease at once; another's is seen by the re-check within 100 ms", async () => {
    const scheduler = new ManualScheduler(1_000_000);
    const options = { client, concurrency: new Concurrency(1, { leaseMs: 60_000 }), onStoreError: 'deny' as const, clock: scheduler, prefix: uniquePrefix('wake'), name: 'jobs' };
    const here = new RedisRateLimiter(options);
    const elsewhere = new RedisRateLimiter(options); // another process's limiter on the same keys

    const first = await here.lease('k');
    const waiting = here.lease('k');
    await here.peek('k'); // its first try has been answered: it waits
    await first.settle(1); // no time passes: woken by the release itself
    const second = await waiting;
    expect(second.decision.allowed).toBe(true);

    let granted = false;
    const third = elsewhere.lease('k').then((lease) => ((granted = true), lease));
    await elsewhere.peek('k');
    await second.cancel(); // released through `here`: `elsewhere` hears nothing
    await scheduler.advanceAsync(99);
    await elsewhere.peek('k');
    expect(granted).toBe(false);
    await scheduler.advanceAsync(1); // the re-check
    expect((await third).decision.allowed).toBe(true);
    expect(granted).toBe(true);
  });

  test('a lease waits FIFO and past maxWaitMs resolves ungranted with the key\'s refusal', async () => {
    const scheduler = new ManualScheduler(5_000);
    const limiter = new RedisRateLimiter({ client, concurrency: new Concurrency(1, { leaseMs: 60_000 }), onStoreError: 'deny', clock: scheduler, prefix: uniquePrefix('fifo') });
    const held = await limiter.lease('k');
    const order: string[] = [];
    const a = limiter.lease('k').then((lease) => (order.push('a'), lease));
    const b = limiter.lease('k', 1, { maxWaitMs: 300 }).then((lease) => (order.push('b'), lease));
    await limiter.peek('k');
    for (let i = 0; i < 3; i++) {
      await scheduler.advanceAsync(100);
      await limiter.peek('k');
    }
    const late = await b;
    expect(late.decision).toMatchObject({ allowed: false, remaining: 0 });
    expect(await late.extend(1000)).toBe(false);
    await held.settle(1);
    expect((await a).decision.allowed).toBe(true);
    expect(order).toEqual(['b', 'a']);
  });

  test('extend: whole ms from 1 to 2^42, false once the lease ended, ALREADY_SETTLED once settled', async () => {
    const clock = new ManualClock(0);
    const limiter = new RedisRateLimiter({ client, concurrency: new Concurrency(1, { leaseMs: 1_000 }), onStoreError: 'deny', clock, prefix: uniquePrefix('extend') });
    const lease = await limiter.lease('k');
    await expect(lease.extend(Infinity)).rejects.toThrow(RangeError);
    await expect(lease.extend(0)).rejects.toThrow(RangeError);
    clock.set(900);
    expect(await lease.extend(5_000)).toBe(true); // now held until 5900
    clock.set(5_000);
    expect((await limiter.peek('k')).allowed).toBe(false);
    clock.set(5_900);
    expect(await lease.extend(5_000)).toBe(false); // ended: the permit may be someone else's
    expect((await limiter.peek('k')).allowed).toBe(true);
    await lease.settle(1);
    await expect(lease.extend(1)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
  });

  test.each(['fixed-window', 'sliding-window-log'] as const)("%s: the key's expiry covers its latest lease end, and a rule change carries the leases over", async (algorithm) => {
    let rule = Rule.perSecond(100);
    const prefix = uniquePrefix('expiry');
    const limiter = new RedisRateLimiter({ client, algorithm, rule: () => rule, concurrency: new Concurrency(1, { leaseMs: 600_000 }), onStoreError: 'deny', prefix });
    const lease = await limiter.reserve('k');
    expect(lease.decision.allowed).toBe(true);
    expect(await client.pttl(`${prefix}${algorithm}:k`)).toBeGreaterThan(590_000);
    rule = Rule.perSecond(50);
    expect((await limiter.reserve('k')).decision).toMatchObject({ allowed: false, limit: 1, remaining: 0 });
    await lease.cancel();
    expect((await limiter.reserve('k')).decision.allowed).toBe(true);
  });

  test("the log keeps its leases in its rule member: a log limiter without concurrency reads a leased log as foreign, one with it reads a plain log as holding none", async () => {
    const prefix = uniquePrefix('log-leases');
    const options = { client, algorithm: 'sliding-window-log' as const, rule: Rule.perMinute(10), onStoreError: 'deny' as const, prefix, name: 'shared' };
    const errors: unknown[] = [];
    const leased = new RedisRateLimiter({ ...options, concurrency: new Concurrency(1) });
    const plain = new RedisRateLimiter({ ...options, onError: (error) => errors.push(error) });
    expect((await plain.reserve('plain')).decision.allowed).toBe(true);
    expect((await leased.reserve('plain')).decision).toMatchObject({ allowed: true, limit: 1, remaining: 0 });
    const lease = await leased.reserve('k');
    expect(lease.decision.allowed).toBe(true);
    const [rule] = await client.zrange(`${prefix}shared:sliding-window-log:k`, '0', '0');
    expect(rule).toMatch(/^l10\/60000\|-inf\|\d+,\d+\|L\d+,1,\d+$/);
    expect(await plain.peek('k')).toMatchObject({ allowed: false, degraded: 'store-error' });
    expect(errors).toEqual([expect.objectContaining({ message: expect.stringMatching(/not a sliding-window-log key/) })]);
    await lease.settle(1);
    expect((await client.zrange(`${prefix}shared:sliding-window-log:k`, '0', '0'))[0]).toBe('r10/60000');
  });

  describe('a waiting lease gives up at once when the rate or a block proves the wait longer than maxWaitMs, as in memory', () => {
    const make: CountedLimiter = (concurrency, clock, rule) => {
      const counted = countingClient(client);
      const rate = rule === undefined ? {} : { algorithm: 'token-bucket' as const, rule };
      return { limiter: new RedisRateLimiter({ client: counted, ...rate, concurrency, onStoreError: 'deny', clock, prefix: uniquePrefix('proven'), timeoutMs: 5_000 }), sent: () => counted.sent.length };
    };
    test('the rate proves it: refused after one script call, no re-check', () => rateProvesTheWait(make));
    test('a block proves it, on an in-flight limit alone', () => blockProvesTheWait(make));
    test('only the in-flight part refuses: the lease waits, re-checks, and is granted on the release', () => onlyInFlightWaits(make));
  });

  describe('a part whose clock is far ahead of the reading: answered as the in-memory Composite, in a bounded search (stepped up to 2^40 times before)', () => {
    const make: MakeLimiter = (rule, concurrency, clock) =>
      new RedisRateLimiter({ client, algorithm: 'token-bucket', rule, concurrency, onStoreError: 'deny', clock, prefix: uniquePrefix('ahead'), timeoutMs: 10_000 });
    test('a lease extended at a later reading', () => extendedAhead(make, new ManualClock(0)));
    test('a settle charged at a later reading', () => chargedAhead(make, new ManualClock(0)));
  });

  test('reset drops the leases', async () => {
    const limiter = new RedisRateLimiter({ client, concurrency: new Concurrency(1), onStoreError: 'deny', prefix: uniquePrefix('reset') });
    const lease = await limiter.reserve('k');
    await limiter.reset('k');
    expect((await limiter.reserve('k')).decision.allowed).toBe(true);
    expect(await (lease as Awaited<ReturnType<typeof limiter.lease>>).extend(1000)).toBe(false);
  });
});

describe.skipIf(!redisPort)('the HTTP middleware over a Redis in-flight limit', () => {
  const client = useIoredis();

  test('reserves, holds the permit until the response closes or the client goes, and refuses at once meanwhile', async () => {
    const limiter = new RedisRateLimiter({
      client,
      algorithm: 'fixed-window',
      rule: Rule.perMinute(10),
      concurrency: new Concurrency(1, { leaseMs: 60_000 }),
      onStoreError: 'deny',
      prefix: uniquePrefix('http'),
    });
    const limit = nodeRateLimit({ limiter, key: () => 'alice', quotaUnit: 'concurrent-requests' });
    let arrived = () => {};
    let release = () => {};
    let closedOne = () => {};
    const server = createServer((req, res) => {
      limit(req, res, (error) => {
        if (error !== undefined) return void res.writeHead(500).end(String(error));
        // After the limit's own listener: by the time this runs, the limit has let go of the permit.
        if (req.url !== '/') res.once('close', () => closedOne());
        if (req.url === '/slow') {
          release = () => void res.end('done');
          return arrived();
        }
        if (req.url === '/hang') return arrived();
        res.end('ok');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const waitFor = () => new Promise<void>((resolve) => (arrived = resolve));
    const closing = () => new Promise<void>((resolve) => (closedOne = resolve));
    try {
      let came = waitFor();
      const slow = fetch(`${url}/slow`);
      await came;
      expect((await fetch(`${url}/`)).status).toBe(429);
      let closed = closing();
      release();
      expect((await slow).status).toBe(200);
      await closed;
      expect((await fetch(`${url}/`)).status).toBe(200);

      // A client that goes before any status: the in-flight permit comes back.
      came = waitFor();
      const abort = new AbortController();
      const hanging = fetch(`${url}/hang`, { signal: abort.signal }).catch(() => undefined);
      await came;
      expect((await fetch(`${url}/`)).status).toBe(429);
      closed = closing();
      abort.abort();
      await hanging;
      await closed;
      expect((await fetch(`${url}/`)).status).toBe(200);
      // Three requests of the minute counted (the two refusals spent nothing), and nothing is held.
      expect(await limiter.peek('alice', 0)).toMatchObject({ remaining: 1, limit: 1 });
      expect(await limiter.peek('alice', 1)).toMatchObject({ allowed: true });
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
