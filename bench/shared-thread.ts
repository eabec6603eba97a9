// A worker thread of bench/shared.ts: decides for `durationMs` at a time, as told, through one of
// three contenders, and posts back how many decisions it made.
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { KeyedRateLimiter, TokenBucket } from '../src/index';
import { SharedKeyedRateLimiter } from '../src/shared/shared-keyed-rate-limiter';
import { HOT_RULE, MANY_RULE } from './algorithms';
import { hotKeyWorkload, manyKeysWorkload } from './workloads';

export type ThreadContender = 'shared' | 'unshared' | 'bridge' | 'pipelined';
export interface ThreadSetup {
  readonly module: string;
  readonly contender: ThreadContender;
  readonly hot: boolean;
  readonly keys: number;
  /** The shared limiter's buffer (shared), or the port to the main thread's limiter (bridge). */
  readonly buffer?: SharedArrayBuffer;
  readonly port?: MessagePort;
}
/**
 * Decisions a bridge worker keeps in flight: 'bridge' awaits each answer before asking again, as a
 * handler that awaits its limiter does; 'pipelined' keeps 64 in flight, the bridge's best case.
 */
export const IN_FLIGHT: Record<'bridge' | 'pipelined', number> = { bridge: 1, pipelined: 64 };

const setup = workerData as ThreadSetup;
const { keys, order } = setup.hot ? hotKeyWorkload() : manyKeysWorkload(setup.keys);
const mask = order.length - 1;
let position = 0;

type Run = (durationMs: number) => Promise<number> | number;

/** Runs `decide` until `durationMs` have passed, reading the time every 256 decisions. */
function timed(decide: (key: string) => number): Run {
  return (durationMs) => {
    const end = performance.now() + durationMs;
    let count = 0;
    let acc = 0;
    while (performance.now() < end) {
      for (let i = 0; i < 256; i++) acc += decide(keys[order[position++ & mask] as number] as string);
      count += 256;
    }
    return acc >= 0 ? count : -count;
  };
}

function contender(): Run {
  const rule = setup.hot ? HOT_RULE : MANY_RULE;
  if (setup.contender === 'shared') {
    const limiter = SharedKeyedRateLimiter.attach(setup.buffer as SharedArrayBuffer);
    return timed((key) => limiter.tryAcquire(key).remaining);
  }
  if (setup.contender === 'unshared') {
    const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) });
    return timed((key) => limiter.tryAcquire(key).remaining);
  }
  const port = setup.port as MessagePort;
  const inFlight = IN_FLIGHT[setup.contender];
  return (durationMs) =>
    new Promise<number>((resolve) => {
      const end = performance.now() + durationMs;
      let answered = 0;
      let sent = 0;
      port.on('message', () => {
        answered++;
        if (performance.now() < end) {
          port.postMessage(keys[order[position++ & mask] as number]);
          sent++;
        } else if (answered === sent) {
          port.removeAllListeners('message');
          resolve(answered);
        }
      });
      for (; sent < inFlight; sent++) port.postMessage(keys[order[position++ & mask] as number]);
    });
}

const run = contender();
parentPort?.on('message', async (durationMs: number) => parentPort?.postMessage(await run(durationMs)));
parentPort?.postMessage('ready');
