import type { Redis } from 'ioredis';
import type { RedisScriptClient } from '../../../src/redis';

/** The documented adapter shape over a real ioredis client, recording each command it sends. */
export function countingClient(redis: Redis): RedisScriptClient & { readonly sent: string[] } {
  const sent: string[] = [];
  return {
    sent,
    evalsha: (sha1, keys, args) => {
      sent.push('EVALSHA');
      return redis.evalsha(sha1, keys.length, ...keys, ...args);
    },
    eval: (script, keys, args) => {
      sent.push('EVAL');
      return redis.eval(script, keys.length, ...keys, ...args);
    },
  };
}
