import { expect } from 'vitest';
import type { RateLimitAlgorithm } from '../../src/index';

/** One row of a timeline: a request at a time, and what the algorithm must answer. */
export interface Moment {
  readonly at: number;
  readonly permits?: number;
  readonly allowed: boolean;
  readonly remaining?: number;
  readonly retryAfterMs?: number;
  readonly resetAfterMs?: number;
}

/** Plays the timeline on `state`, checking each answer field given in the row. */
export function expectTimeline(state: RateLimitAlgorithm, moments: readonly Moment[]): void {
  for (const { at, permits = 1, ...expected } of moments) {
    expect(state.tryAcquire(at, permits), `at ${at} ms, ${permits} permit(s)`).toMatchObject(expected);
  }
}
