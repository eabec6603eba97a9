import { describe, expect, test, vi } from 'vitest';
import { allow } from '../../src/core/decision';

// The window a decision was counted under travels beside it (src/store/decision-window.ts), so the
// HTTP policy can advertise a per-key `w` while the decision stays deep-equal to the in-memory
// twin's. A store limiter and the middleware may come from different copies of ratekeeper (its
// ESM and CommonJS builds, or separately bundled entry points): the copies must read one registry.
describe('the window noted beside a decision', () => {
  test('is read back for that decision only, and adds nothing to the decision itself', async () => {
    const { noteWindow, windowOf } = await import('../../src/store/decision-window');
    const noted = allow(10, 9, 60_000);
    const other = allow(10, 9, 60_000);
    noteWindow(noted, 60_000);
    expect(windowOf(noted)).toBe(60_000);
    expect(windowOf(other)).toBeUndefined();
    expect(noted).toEqual(other);
    expect(Object.keys(noted)).toEqual(Object.keys(other));
  });

  test('is shared by two separately loaded copies of the module', async () => {
    const first = await import('../../src/store/decision-window');
    vi.resetModules();
    const second = await import('../../src/store/decision-window');
    expect(second).not.toBe(first);
    const decision = allow(5, 4, 1000);
    first.noteWindow(decision, 1000);
    expect(second.windowOf(decision)).toBe(1000);
  });
});
