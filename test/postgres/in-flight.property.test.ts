// Issue 25 over PostgreSQL (DESIGN-25 S4): a PostgresRateLimiter with `concurrency` decides as its
// in-memory twin, a KeyedRateLimiter of Composite([algorithm(rule), concurrency]) (or Concurrency
// alone), given the same clock readings, under random reserve/settle/cancel/extend/peek/reset/block
// traces, all five algorithms.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { Concurrency, ManualClock, Rule } from '../../src/index';
import { type PostgresAlgorithm, PostgresRateLimiter } from '../../src/postgres';
import { algorithmNames } from '../redis/helpers/algorithms';
import { inMemoryTwin, perKeyTwin, replay, ruledTraces, traceStep } from '../support/in-flight-twin';
import { postgresPort } from '../stores/support/postgres-store';
import { migratedSchema } from './helpers/schema';

const traces = fc.record({
  startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
  // Windows of 20 s and more, as the store conformance suite: rows expire on the server's clock.
  limit: fc.integer({ min: 1, max: 12 }),
  windowMs: fc.integer({ min: 20_000, max: 200_000 }),
  inFlight: fc.integer({ min: 1, max: 5 }),
  leaseMs: fc.integer({ min: 20_000, max: 90_000 }),
  steps: fc.array(traceStep, { minLength: 1, maxLength: 40, size: 'max' }),
});

describe.skipIf(!postgresPort)('in-flight limits over PostgreSQL equal their in-memory twin', () => {
  const made = migratedSchema('in-flight');
  for (const algorithm of [...algorithmNames, undefined] as (PostgresAlgorithm | undefined)[]) {
    test.prop([traces], { numRuns: 25 })(`${algorithm ?? 'Concurrency alone'}`, async ({ startMs, limit, windowMs, inFlight, leaseMs, steps }) => {
      const rule = new Rule(limit, windowMs);
      const clock = new ManualClock(startMs);
      const { memory, readings } = inMemoryTwin(algorithm, rule, inFlight, leaseMs, clock);
      const concurrency = new Concurrency(inFlight, { leaseMs });
      const options = { client: made.pool, schema: made.schema, concurrency, onStoreError: 'deny', clock: readings, prefix: `${Math.random()}:`, timeoutMs: 5_000 } as const;
      const store = algorithm === undefined ? new PostgresRateLimiter(options) : new PostgresRateLimiter({ ...options, algorithm, rule });
      const cap = algorithm === undefined ? inFlight : Math.min(limit, inFlight);
      const { fromMemory, fromStore } = await replay(memory, store, steps, cap, clock);
      expect(fromStore).toEqual(fromMemory);
    });
  }

  for (const algorithm of algorithmNames) {
    test.prop([ruledTraces(20_000)], { numRuns: 25 })(`${algorithm}, a rule per key: a lease taken under the key's old rule is settled, cancelled and extended under its new one, as the twin reconfigured per key`, async ({ startMs, rules, inFlight, leaseMs, steps }) => {
      const clock = new ManualClock(startMs);
      const ruleList = rules.map(({ limit, windowMs }) => new Rule(limit, windowMs));
      const { memoryOf, ruleOf, choose, readings } = perKeyTwin(algorithm, ruleList, inFlight, leaseMs, clock);
      const concurrency = new Concurrency(inFlight, { leaseMs });
      const store = new PostgresRateLimiter({ client: made.pool, schema: made.schema, algorithm, rule: ruleOf, concurrency, onStoreError: 'deny', clock: readings, prefix: `${Math.random()}:`, timeoutMs: 5_000 });
      const cap = Math.min(inFlight, ...ruleList.map(({ limit }) => limit));
      const { fromMemory, fromStore } = await replay(memoryOf, store, steps, cap, clock, choose);
      expect(fromStore).toEqual(fromMemory);
    });
  }
});
