import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix, useBothClients } from './helpers/clients';

// A window of 10^12 ms (until 2033 for the aligned windows) so that nothing refills during a test:
// the count of allowed requests must then be exactly the limit, on the server's clock.
const longRule = (limit: number) => new Rule(limit, 1e12);

function nextMessage(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`racer exited with code ${code}`)));
  });
}

describe.skipIf(!redisPort)('concurrent requests never exceed the limit together', () => {
  const clients = useBothClients();

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    test.each(algorithmNames)(`%s over ${clientName}: 200 calls at once for 10 permits, exactly 10 pass`, async (algorithm) => {
      const limiter = new RedisRateLimiter({ client: clients[clientName], algorithm, rule: longRule(10), onStoreError: 'deny', prefix: uniquePrefix('burst') });
      const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.tryAcquire('hot')));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(10);
      expect(decisions.every((decision) => decision.degraded === undefined)).toBe(true);
      expect(decisions.filter((decision) => decision.allowed).map((decision) => decision.remaining).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    });
  }

  test('four processes racing on one key, every algorithm: together exactly the limit', { timeout: 30_000 }, async () => {
    const limit = 25;
    const prefix = uniquePrefix('race');
    const racer = fileURLToPath(new URL('./fixtures/racer.ts', import.meta.url));
    const children = Array.from({ length: 4 }, () =>
      fork(racer, [String(redisPort), prefix, String(limit), '40'], { execArgv: ['--import', 'tsx'], stdio: 'inherit' }),
    );
    await Promise.all(children.map(nextMessage)); // each is connected and waiting
    const results = children.map(nextMessage);
    for (const child of children) child.send('go');
    const counts = (await Promise.all(results)) as number[][];
    const totals = algorithmNames.map((_, i) => counts.reduce((sum, perProcess) => sum + perProcess[i]!, 0));
    expect(totals).toEqual(algorithmNames.map(() => limit));
  });
});
