/**
 * A call or step still unsettled this long after it began has hung. Many times any timeoutMs or
 * wait in the tests on purpose: the bound catches a timer that never fired or a loop that never
 * ended, never a slow machine (timeoutMs + 350 ms and a 2 s bound both failed under load). What a
 * test checks about timing shows in its answers (`degraded`, the order of events) or in a lower
 * bound, which load can only move further from failing.
 */
export const HANG_MS = 5_000;
