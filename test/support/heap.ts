import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** heapUsed after a full garbage collection, also when the test runner did not start Node with --expose-gc. */
export function heapAfterGc(): number {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
  return process.memoryUsage().heapUsed;
}
