import type { RedisScriptClient } from '../../../src/redis';

/**
 * The adapter shape over a real client that records the keys of each script call and, while
 * closed, holds every reply back until `open()`: a round trip that takes as long as a test likes,
 * so calls can arrive while one is in flight. `isCluster` makes the limiter batch by hash slot.
 * It says it is `ordered` as the client it wraps is, unless told otherwise (an HTTP client's shape).
 */
export function gatedClient(inner: RedisScriptClient, options: { isCluster?: boolean; ordered?: boolean } = {}) {
  const sent: string[][] = [];
  let held: (() => void)[] | undefined = [];
  const hold = <T>(reply: Promise<T>): Promise<T> => {
    if (held === undefined) return reply;
    const queue = held;
    return new Promise<T>((resolve, reject) => queue.push(() => reply.then(resolve, reject)));
  };
  return {
    ...(options.isCluster ? { isCluster: true } : {}),
    ordered: options.ordered ?? inner.ordered,
    sent,
    /** Lets the held replies through, in the order sent, and every later one at once. */
    open(): void {
      const queue = held ?? [];
      held = undefined;
      for (const release of queue) release();
    },
    evalsha: (sha1: string, keys: string[], args: string[]) => {
      sent.push(keys);
      return hold(inner.evalsha(sha1, keys, args));
    },
    eval: (script: string, keys: string[], args: string[]) => {
      sent.push(keys);
      return hold(inner.eval(script, keys, args));
    },
  } satisfies RedisScriptClient & Record<string, unknown>;
}

/** One macrotask later: the next call arrives as a request in its own I/O callback would. */
export const nextMacrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
