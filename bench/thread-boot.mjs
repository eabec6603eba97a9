// Worker threads do not inherit `--import tsx`: register it here, then load the TypeScript module
// named in workerData.module (bench/shared-thread.ts).
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.module);
