// The in-flight property shared by the Redis and PostgreSQL suites (DESIGN-25 S4): a store limiter
// with `concurrency` and its in-memory twin, a KeyedRateLimiter of Composite([algorithm(rule),
// Concurrency]) (or Concurrency alone), driven by one random trace with the same clock readings.
import { fc } from '@fast-check/vitest';
import { type AsyncLease, type Clock, Composite, Concurrency, KeyedRateLimiter, type Lease, type ManualClock, type PeekableAlgorithm, type Rule } from '../../src/index';
import type { RuleOf, StoreRateLimiter } from '../../src/store/store-rate-limiter';
import { twins } from '../redis/helpers/algorithms';

/** One step of a trace: mostly small moves, some past a lease or a window, some backwards (both sides read the latest), quarters of a ms too. */
export const traceStep = fc.record({
  moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 0, max: 120_000 }), fc.integer({ min: -2_000, max: -1 }), fc.integer({ min: -4_000, max: 4_000 }).map((q) => q / 4)),
  key: fc.constantFrom('a', 'b'),
  op: fc.constantFrom('reserve', 'reserve', 'reserve', 'settle', 'settle', 'cancel', 'extend', 'extend', 'peek', 'peek0', 'reset', 'block', 'again'),
  share: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
  ms: fc.oneof(fc.integer({ min: 1, max: 100_000 }), fc.constant(2 ** 42)),
});

export type TraceStep = typeof traceStep extends fc.Arbitrary<infer T> ? T : never;

/**
 * Traces for a limiter with a rule function (see perKeyTwin), leases at least `leaseMinMs` long:
 * each reservation moves its key to the rule it picks. Windows of 20 s and more (stores expire on
 * their own clock). No resets: a refund on a key not stored answers a new key under its
 * reservation's rule, where the twin has the key's.
 */
export const ruledTraces = (leaseMinMs: number) =>
  fc.record({
    startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
    rules: fc.array(fc.record({ limit: fc.integer({ min: 1, max: 12 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) }), { minLength: 2, maxLength: 3 }),
    inFlight: fc.integer({ min: 1, max: 5 }),
    leaseMs: fc.integer({ min: leaseMinMs, max: 90_000 }),
    steps: fc.array(traceStep.filter(({ op }) => op !== 'reset'), { minLength: 1, maxLength: 40, size: 'max' }),
  });

/** The twin, and the readings the store is given: the keyed twin holds every reading to the latest it has seen, on any key, and so does the store's clock. */
export function inMemoryTwin(algorithm: keyof typeof twins | undefined, rule: Rule, inFlight: number, leaseMs: number, clock: ManualClock): { memory: KeyedRateLimiter; readings: Clock } {
  let latest = -Infinity;
  const memory = new KeyedRateLimiter({
    algorithm: () => (algorithm === undefined ? new Concurrency(inFlight, { leaseMs }) : new Composite([new twins[algorithm](rule) as PeekableAlgorithm, new Concurrency(inFlight, { leaseMs })])),
    clock,
  });
  return { memory, readings: { now: () => (latest = Math.max(latest, clock.now())) } };
}

/**
 * The twin of a store limiter whose rule is a function of the key (`ruleOf`): one KeyedRateLimiter
 * per key, reconfigured when its key's rule changes, on the shared readings (the store's clock
 * holds every reading to the latest on any key, so each key's twin must too). `choose(key, pick)`
 * moves the key to `rules[pick % rules.length]` (replay does it before each reservation, a call
 * that looks the rule up).
 */
export function perKeyTwin(
  algorithm: keyof typeof twins,
  rules: readonly Rule[],
  inFlight: number,
  leaseMs: number,
  clock: ManualClock,
): { memoryOf: (key: string) => KeyedRateLimiter; ruleOf: RuleOf; choose: (key: string, pick: number) => void; readings: Clock } {
  let latest = -Infinity;
  const readings = { now: () => (latest = Math.max(latest, clock.now())) };
  const composite = (rule: Rule) => new Composite([new twins[algorithm](rule) as PeekableAlgorithm, new Concurrency(inFlight, { leaseMs })]);
  const keys = new Map<string, { rule: Rule; memory: KeyedRateLimiter }>();
  const entry = (key: string) => {
    let held = keys.get(key);
    if (held === undefined) keys.set(key, (held = { rule: rules[0]!, memory: new KeyedRateLimiter({ algorithm: () => composite(rules[0]!), clock: readings }) }));
    return held;
  };
  const choose = (key: string, pick: number) => {
    const held = entry(key);
    const rule = rules[pick % rules.length]!;
    if (rule.limit === held.rule.limit && rule.windowMs === held.rule.windowMs) return;
    held.rule = rule;
    held.memory.reconfigure(() => composite(rule));
  };
  return { memoryOf: (key) => entry(key).memory, ruleOf: (key) => entry(key).rule, choose, readings };
}

/** A settled promise as a value, so that the same failure on both sides compares equal. */
async function outcome(call: () => unknown): Promise<unknown> {
  try {
    const value = await call();
    return value === undefined ? 'done' : value;
  } catch (error) {
    return { failed: (error as { code?: string }).code ?? String(error) };
  }
}

/**
 * Drives both through `steps` (permits up to `cap`); what each answered, in order, then each key's
 * state. With rules per key, `memory` is each key's twin and `choose` moves a key to the rule the
 * step picks before each reservation (see perKeyTwin): settles, cancels and extensions of leases
 * taken under another rule follow.
 */
export async function replay(
  memory: KeyedRateLimiter | ((key: string) => KeyedRateLimiter),
  store: StoreRateLimiter<Rule> | StoreRateLimiter<RuleOf>,
  steps: readonly TraceStep[],
  cap: number,
  clock: ManualClock,
  choose?: (key: string, pick: number) => void,
): Promise<{ fromMemory: unknown[]; fromStore: unknown[] }> {
  const twin = typeof memory === 'function' ? memory : () => memory;
  const leases: { memory: Lease; store: AsyncLease; permits: number }[] = [];
  const fromMemory: unknown[] = [];
  const fromStore: unknown[] = [];
  const both = async (inMemory: () => unknown, inStore: () => unknown) => {
    fromMemory.push(await outcome(inMemory));
    fromStore.push(await outcome(inStore));
  };
  for (const { moveMs, key, op, share, pick, ms } of steps) {
    clock.set(clock.now() + moveMs);
    const permits = 1 + Math.floor(share * (cap - 1));
    const lease = leases.length === 0 ? undefined : leases[pick % leases.length]!;
    if (op === 'reserve') {
      choose?.(key, pick);
      const inMemory = twin(key).reserve(key, permits) as Lease;
      const inStore = (await store.reserve(key, permits)) as AsyncLease;
      fromMemory.push(inMemory.decision);
      fromStore.push(inStore.decision);
      if (inMemory.decision.allowed && inStore.decision.allowed) leases.push({ memory: inMemory, store: inStore, permits });
    } else if (op === 'peek') await both(() => twin(key).peek(key, permits), () => store.peek(key, permits));
    else if (op === 'peek0') await both(() => twin(key).peek(key, 0), () => store.peek(key, 0));
    else if (op === 'reset') await both(() => twin(key).reset(key), () => store.reset(key));
    else if (op === 'block') await both(() => twin(key).block(key, ms), () => store.block(key, ms));
    else if (lease !== undefined) {
      const actual = Math.floor(share * 2 * lease.permits);
      if (op === 'extend') await both(() => lease.memory.extend(ms), () => lease.store.extend(ms));
      else if (op === 'cancel') await both(() => lease.memory.cancel(), () => lease.store.cancel());
      else await both(() => lease.memory.settle(actual), () => lease.store.settle(actual));
    }
  }
  for (const key of ['a', 'b']) await both(() => twin(key).peek(key, 0), () => store.peek(key, 0));
  return { fromMemory, fromStore };
}
