/** The client shape readiness is read from: ioredis (`status`) or node-redis (`isOpen`, `isReady`), and their events. */
interface Observable {
  options?: { enableOfflineQueue?: unknown; disableOfflineQueue?: unknown };
  status?: unknown;
  isOpen?: unknown;
  isReady?: unknown;
  once?: unknown;
  removeListener?: unknown;
}

type Emitter = { once(event: string, listener: () => void): unknown; removeListener(event: string, listener: () => void): unknown };

/** What ends a wait for a connection attempt: it succeeded, failed, or the client was closed. */
const OUTCOMES = ['ready', 'error', 'close', 'end'];

/** Clients seen ready once: nothing waits for them again. */
const beenReady = new WeakSet<object>();

/** Each client's connection attempt under way, shared by every limiter on it (one set of listeners). */
const attempts = new WeakMap<object, Promise<void>>();

/**
 * For a client that fails commands while not ready instead of queueing them (ioredis
 * `enableOfflineQueue: false`, node-redis `disableOfflineQueue: true`): a function answering, before
 * each script call, a promise to wait on while the client's first connection attempt is under way
 * (until it is ready, fails, or is closed), else undefined. Without it a fresh process's first calls,
 * made before `'ready'`, would all go to the outage policy. Once the client has been ready, nothing
 * waits: a client that loses its server later fails at once, which is why the queue was turned off.
 * Undefined for a client that queues commands, or whose readiness cannot be seen (GLIDE connects
 * before it is handed over; an HTTP client has no connection).
 */
export function startUp(client: unknown): (() => Promise<void> | undefined) | undefined {
  if (client === null || typeof client !== 'object') return undefined;
  const c = client as Observable;
  const failsOffline = c.options?.enableOfflineQueue === false || c.options?.disableOfflineQueue === true;
  if (!failsOffline || typeof c.once !== 'function' || typeof c.removeListener !== 'function') return undefined;
  const emitter = client as Emitter;
  return () => {
    if (beenReady.has(client)) return undefined;
    if (c.status === 'ready' || c.isReady === true) {
      beenReady.add(client);
      return undefined;
    }
    // ioredis between attempts ('reconnecting'), not yet told to connect ('wait', lazyConnect) or
    // closed: no attempt is under way to wait for. node-redis is connecting while open and not ready.
    const connecting = c.status === 'connecting' || c.status === 'connect' || (c.isOpen === true && c.isReady === false);
    if (!connecting) return undefined;
    let attempt = attempts.get(client);
    if (attempt === undefined) {
      attempt = new Promise<void>((resolve) => {
        const ended = () => {
          for (const event of OUTCOMES) emitter.removeListener(event, ended);
          attempts.delete(client);
          resolve();
        };
        for (const event of OUTCOMES) emitter.once(event, ended);
      });
      attempts.set(client, attempt);
    }
    return attempt;
  };
}
