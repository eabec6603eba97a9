// `npm run bench`: runs every measurement in its own child process, prints the tables and writes
// bench/RESULTS.md. Each child measures its contenders side by side in interleaved rounds, so every
// ratio below is a median of ratios taken in one process, moments apart.
import { writeFile } from 'node:fs/promises';
import { ALGORITHM_NAMES } from './algorithms';
import { runChild } from './child';
import { type FloodResult, renderFlood } from './flood';
import type { HeapResult } from './heap';
import type { LatencyRun } from './latency';
import type { HttpResult } from './http';
import type { RedisResult } from './redis';
import type { ArrivalResult } from './redis-arrivals';
import { renderStores, STORES, type StoresResult } from './stores';
import { renderShared, type SharedResult } from './shared';
import { type AdmitResult, renderAdmit } from './admit';
import { type InFlightResult, renderInFlight } from './in-flight';
import { type InFlightRedisResult, renderInFlightRedis } from './in-flight-redis';
import { machine, render, type BenchResults } from './report';
import type { ThroughputResult, Variant } from './throughput';

/** Trials of the million-key latency run, each in a fresh process. */
const LATENCY_TRIALS = 3;

async function main(): Promise<void> {
  const started = performance.now();
  const before = machine();
  const step = (label: string) => console.error(`[bench ${((performance.now() - started) / 1000).toFixed(0).padStart(3)} s] ${label}`);

  const throughput: ThroughputResult[] = [];
  for (const algorithm of ALGORITHM_NAMES) {
    step(`in memory: ${algorithm}`);
    throughput.push(await runChild<ThroughputResult>('./throughput.ts', [algorithm, 'system']));
  }
  const variants: Variant[] = ['bounded', 'counter-clock', 'churn'];
  for (const variant of variants) {
    step(`in memory: token-bucket, ${variant}`);
    throughput.push(await runChild<ThroughputResult>('./throughput.ts', ['token-bucket', variant]));
  }
  step('heap bytes per key');
  const heap = await runChild<HeapResult>('./heap.ts');
  const latency: LatencyRun[] = [];
  for (let trial = 1; trial <= LATENCY_TRIALS; trial++) {
    step(`latency while reclaiming a million keys, trial ${trial}`);
    latency.push(await runChild<LatencyRun>('./latency.ts', ['ratekeeper']));
  }
  step('latency control: bare Map');
  const control = await runChild<LatencyRun>('./latency.ts', ['map']);
  step('redis: same-tick loops');
  const redis = await runChild<RedisResult>('./redis.ts');
  step('redis: one call per macrotask at 1, 8, 64 and 256 in flight');
  const arrivals = await runChild<ArrivalResult>('./redis-arrivals.ts');
  step('http: end to end with autocannon');
  const http = await runChild<HttpResult>('./http.ts');
  const stores: StoresResult[] = [];
  for (const store of STORES) {
    step(`shared store: ${store}`);
    stores.push(await runChild<StoresResult>('./stores.ts', [store]));
  }
  const storeTables = renderStores(stores);
  step('flood: ten million unique keys');
  const floodResult = await runChild<FloodResult>('./flood.ts');
  const flood = renderFlood(floodResult);
  step('ratekeeper/shared: 1, 2 and 4 threads; the shared table in one thread');
  const shared = renderShared(await runChild<SharedResult>('./shared.ts'));
  step('in-flight limits: Concurrency(2) lease/settle beside p-limit(2)');
  const inFlight = renderInFlight(await runChild<InFlightResult>('./in-flight.ts'));
  step("in-flight limits over Redis: 64 callers beside bottleneck's Redis mode");
  const inFlightRedis = renderInFlightRedis(await runChild<InFlightRedisResult>('./in-flight-redis.ts'));
  step('admit: three parts in memory beside three reserve calls');
  const admission = renderAdmit(await runChild<AdmitResult>('./admit.ts'));

  const results: BenchResults = {
    machine: before,
    loadAfter: machine().loadAverage,
    seconds: (performance.now() - started) / 1000,
    throughput,
    heap,
    latency,
    control,
    redis,
    arrivals,
    http,
    flood: floodResult,
  };
  const { text, markdown } = render(results);
  console.log(text + storeTables.text + flood.text + shared.text + inFlight.text + inFlightRedis.text + admission.text);
  await writeFile(new URL('./RESULTS.md', import.meta.url), `${markdown}\n${storeTables.markdown}\n${flood.markdown}${shared.markdown}${inFlight.markdown}${inFlightRedis.markdown}${admission.markdown}`);
  step('wrote bench/RESULTS.md');
}

await main();
