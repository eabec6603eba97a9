import { expect } from 'vitest';
import type { AsyncRateLimiter, Decision } from '../../src/index';
import { HANG_MS } from './hang';

/** Calls `tryAcquire` and measures how long it took to settle. */
export async function timed(limiter: AsyncRateLimiter, key: string, permits = 1): Promise<{ decision: Decision; elapsed: number }> {
  const started = performance.now();
  const decision = await limiter.tryAcquire(key, permits);
  return { decision, elapsed: performance.now() - started };
}

/**
 * Calls until the store answers normally again, for at most `ms`, no call hanging (HANG_MS);
 * resolves with the first decision not degraded, or the last one tried.
 */
export async function recovered(limiter: AsyncRateLimiter, key: string, ms: number): Promise<Decision> {
  const deadline = performance.now() + ms;
  for (;;) {
    const { decision, elapsed } = await timed(limiter, key);
    expect(elapsed).toBeLessThan(HANG_MS);
    if (decision.degraded === undefined || performance.now() > deadline) return decision;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
