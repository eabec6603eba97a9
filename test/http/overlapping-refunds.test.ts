// skipFailedRequests on a token bucket with requests in flight at once (issue 24): each failed
// request's reservation is cancelled when its response ends, in whatever order the responses end,
// and every one of them must give its permit back, so that no failure is counted against the
// successes that follow. A bare node:http server on loopback, whose handlers answer when the test says.
import type { AddressInfo } from 'node:net';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterEach, expect, it } from 'vitest';
import { nodeRateLimit } from '../../src/http';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';

let server: Server | undefined;
afterEach(async () => {
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

/** A server whose handler for `/<id>/<status>` answers `status` once `release(id)` is called; `/now/<status>` at once. */
async function start(limiter: KeyedRateLimiter) {
  const waiting = new Map<string, () => void>();
  const middleware = nodeRateLimit({ limiter, key: () => 'k', skipFailedRequests: true });
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    middleware(req, res, () => {
      const [, id = '', status = '200'] = (req.url ?? '').split('/');
      const answer = () => {
        res.statusCode = Number(status);
        res.end(status);
      };
      if (id === 'now') answer();
      else waiting.set(id, answer);
    });
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const until = async (read: () => number, wanted: number) => {
    // Real time, generously bounded: requests arrive and settle on the server's own turns.
    for (let i = 0; i < 400 && read() !== wanted; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(read()).toBe(wanted);
  };
  return {
    get: (path: string) => fetch(`${url}${path}`),
    release: (id: string) => waiting.get(id)?.(),
    arrived: (count: number) => until(() => waiting.size, count),
    settled: (remaining: number) => until(() => limiter.peek('k', 0).remaining, remaining),
  };
}

it('failed requests in flight together each give their permit back, whatever order they end in: the successes after them are not refused', async () => {
  const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(10)), clock: new ManualClock(0) });
  const { get, release, arrived, settled } = await start(limiter);
  const statuses = ['500', '500', '200', '500'];
  const responses = statuses.map((status, id) => get(`/${id}/${status}`));
  await arrived(statuses.length);
  expect(limiter.peek('k', 0).remaining).toBe(6);
  // The last granted ends first, the first granted last.
  for (const id of ['3', '2', '1', '0']) {
    release(id);
    await (await responses[Number(id)]!).text();
  }
  await settled(9);
  const after: number[] = [];
  for (let i = 0; i < 10; i++) after.push((await get('/now/200')).status);
  expect(after).toEqual([...Array<number>(9).fill(200), 429]);
});
