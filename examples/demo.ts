// npm run demo: the same traffic through all five algorithms on a ManualClock, printed as a
// timeline and drawn to docs/algorithms.svg. Read it top to bottom to see how each one decides.
import { writeFileSync } from 'node:fs';
import {
  FixedWindow,
  KeyedRateLimiter,
  LeakyBucket,
  ManualClock,
  Rule,
  SlidingWindowCounter,
  SlidingWindowLog,
  TokenBucket,
  type Decision,
} from '../src/index';
import { drawTimeline, type Lane, type Request } from './demo-svg';

const rule = Rule.perSecond(5);
const algorithms = {
  TokenBucket: () => new TokenBucket(rule),
  LeakyBucket: () => new LeakyBucket(rule),
  FixedWindow: () => new FixedWindow(rule),
  SlidingWindowLog: () => new SlidingWindowLog(rule),
  SlidingWindowCounter: () => new SlidingWindowCounter(rule),
};

const requests: Request[] = [
  ...times(8, 100, 40).map((at) => ({ at, permits: 1, phase: 'burst of 8' })),
  ...times(11, 1200, 150).map((at) => ({ at, permits: 1, phase: 'steady, one every 150 ms' })),
  ...times(5, 3800, 40).map((at) => ({ at, permits: 1, phase: 'burst across the 4 s boundary' })),
  ...times(5, 4000, 40).map((at) => ({ at, permits: 1, phase: 'burst across the 4 s boundary' })),
  { at: 4500, permits: 2, phase: 'a two-permit request' },
  { at: 5300, permits: 2, phase: 'a two-permit request' },
];

const lanes: Lane[] = Object.entries(algorithms).map(([name, algorithm]) => {
  const clock = new ManualClock();
  const limiter = new KeyedRateLimiter({ algorithm, clock });
  const decisions = requests.map(({ at, permits }) => {
    clock.set(at);
    return limiter.tryAcquire('demo-user', permits);
  });
  return { name, decisions };
});

console.log(`Rule: ${rule.limit} per ${rule.windowMs} ms. Each cell: ✔ remaining, or ✘ retry-after.\n`);
const width = 22;
console.log(`${'time'.padStart(7)}  ${'n'}  ${lanes.map((lane) => lane.name.padEnd(width)).join('')}`);
let phase = '';
requests.forEach((request, i) => {
  if (request.phase !== phase) console.log(`\n  — ${(phase = request.phase)}`);
  const cells = lanes.map((lane) => cell(lane.decisions[i] as Decision).padEnd(width));
  console.log(`${`${request.at} ms`.padStart(7)}  ${request.permits}  ${cells.join('')}`);
});
console.log(`\n${'allowed'.padStart(10)}  ${lanes.map((lane) => `${lane.decisions.filter((d) => d.allowed).length} of ${requests.length}`.padEnd(width)).join('')}`);

writeFileSync(new URL('../docs/algorithms.svg', import.meta.url), drawTimeline(rule, requests, lanes));
console.log('\nWrote docs/algorithms.svg: what each algorithm let through over time.');

function times(count: number, from: number, step: number): number[] {
  return Array.from({ length: count }, (_, i) => from + i * step);
}

function cell(decision: Decision): string {
  return decision.allowed ? `✔ ${decision.remaining} left` : `✘ retry ${decision.retryAfterMs} ms`;
}
