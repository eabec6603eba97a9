import { RateLimiterMemory } from 'rate-limiter-flexible';
import { TokenBucket as LimiterTokenBucket } from 'limiter';
import { KeyedRateLimiter, systemClock, type Clock, type RateLimitAlgorithm, type Rule } from '../src/index';

// Every contender gets its own loop function, written out, so that V8 sees one receiver type per
// call site (a shared loop would go polymorphic and slow everyone down). Each loop walks the same
// pre-generated key order, reads a field of every answer into `acc` (defeating dead-code
// elimination), and returns it.

/** The keys a workload touches and the order it touches them in: `keys[order[i & (order.length - 1)]]`. */
export interface Workload {
  readonly keys: readonly string[];
  readonly order: Uint32Array;
}

/** A contender runs `n` decisions starting at position `start` of the workload and returns its accumulator. */
export interface Contender {
  readonly name: string;
  run(start: number, n: number): number | Promise<number>;
}

export function ratekeeper(
  name: string,
  workload: Workload,
  algorithm: () => RateLimitAlgorithm,
  clock: Clock = systemClock,
  maxKeys = Infinity,
): Contender {
  return tryAcquireLoop(name, workload, new KeyedRateLimiter({ algorithm, clock, maxKeys }));
}

/** What a tryAcquire loop needs of a limiter: a KeyedRateLimiter of this tree or of another (bench/ab-memory.ts). */
export interface TryAcquire {
  tryAcquire(key: string): { readonly remaining: number };
}

/** `limiter.tryAcquire` over the workload. */
export function tryAcquireLoop(name: string, workload: Workload, limiter: TryAcquire): Contender {
  const { keys, order } = workload;
  const mask = order.length - 1;
  return {
    name,
    run(start, n) {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const decision = limiter.tryAcquire(keys[order[(start + i) & mask] as number] as string);
        acc += decision.remaining;
      }
      return acc;
    },
  };
}

/** `limiter.peek` on keys made resident first: what a dashboard pays per read, spending nothing. */
export function ratekeeperPeek(name: string, workload: Workload, algorithm: () => RateLimitAlgorithm): Contender {
  const limiter = new KeyedRateLimiter({ algorithm });
  const { keys, order } = workload;
  for (const key of keys) limiter.tryAcquire(key);
  const mask = order.length - 1;
  return {
    name,
    run(start, n) {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const decision = limiter.peek(keys[order[(start + i) & mask] as number] as string);
        acc += decision.remaining;
      }
      return acc;
    },
  };
}

export interface FloorState {
  tokens: number;
  at: number;
}

export const FLOOR = 'floor (Map + inline bucket)';

/** The floor: read performance.now(), look the key up in a Map, token-bucket arithmetic inline, nothing else. */
export function floor(workload: Workload, rule: Rule): Contender {
  const states = new Map<string, FloorState>();
  const capacity = rule.limit;
  const perMs = rule.limit / rule.windowMs;
  const { keys, order } = workload;
  const mask = order.length - 1;
  return {
    name: FLOOR,
    run(start, n) {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        if (floorDecide(states, keys[order[(start + i) & mask] as number] as string, capacity, perMs)) acc++;
      }
      return acc;
    },
  };
}

/**
 * One decision of the floor: the clock, the Map lookup and the token-bucket arithmetic a limiter
 * cannot do without. Small enough that V8 inlines it into each loop, so it costs what inline code does.
 */
export function floorDecide(states: Map<string, FloorState>, key: string, capacity: number, perMs: number): boolean {
  const now = performance.now();
  let state = states.get(key);
  if (state === undefined) {
    state = { tokens: capacity, at: now };
    states.set(key, state);
  }
  const tokens = Math.min(capacity, state.tokens + (now - state.at) * perMs);
  if (tokens < 1) return false;
  state.tokens = tokens - 1;
  state.at = now;
  return true;
}

/** How many consume() promises rate-limiter-flexible gets in flight before they are awaited. */
const RLF_BATCH = 256;

export const RLF = 'rate-limiter-flexible Memory';

/** rate-limiter-flexible's RateLimiterMemory with the same rule, promises awaited in batches. */
export function rateLimiterFlexible(workload: Workload, rule: Rule): Contender {
  const limiter = new RateLimiterMemory({ points: rule.limit, duration: rule.windowMs / 1000 });
  const { keys, order } = workload;
  const mask = order.length - 1;
  const pending: Promise<{ remainingPoints: number }>[] = [];
  return {
    name: RLF,
    async run(start, n) {
      let acc = 0;
      for (let done = 0; done < n; done += RLF_BATCH) {
        const batch = Math.min(RLF_BATCH, n - done);
        for (let j = 0; j < batch; j++) pending[j] = limiter.consume(keys[order[(start + done + j) & mask] as number] as string);
        for (let j = 0; j < batch; j++) acc += (await pending[j])!.remainingPoints;
      }
      return acc;
    },
  };
}

export const LIMITER = 'limiter TokenBucket (one bucket)';

/** `limiter`'s TokenBucket: one bucket, no keys at all, so it appears on the hot-key row only. */
export function limiterTokenBucket(rule: Rule): Contender {
  const bucket = new LimiterTokenBucket({ bucketSize: rule.limit, tokensPerInterval: rule.limit, interval: rule.windowMs });
  return {
    name: LIMITER,
    run(_start, n) {
      let acc = 0;
      for (let i = 0; i < n; i++) if (bucket.tryRemoveTokens(1)) acc++;
      return acc;
    },
  };
}
