import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { algorithmNames } from './helpers/algorithms';
import { redisPort, uniquePrefix } from './helpers/clients';

// 200 calls at once for 10 permits, for every store and algorithm, is in the store conformance
// suite (test/stores/conformance.ts); here, several processes race on one Redis key.

function nextMessage(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`racer exited with code ${code}`)));
  });
}

describe.skipIf(!redisPort)('concurrent requests never exceed the limit together', () => {
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
