import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Runs a bench module in its own Node process (same flags: --expose-gc, --import tsx) and resolves
 * with the one message it sends. A fresh process per measurement keeps JIT feedback and heap state
 * from one measurement out of the next.
 */
export function runChild<T>(module: string, args: readonly string[] = [], extraExecArgv: readonly string[] = []): Promise<T> {
  const path = fileURLToPath(new URL(module, import.meta.url));
  return new Promise((resolve, reject) => {
    const child = fork(path, [...args], { execArgv: [...process.execArgv, ...extraExecArgv], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let result: { value: T } | undefined;
    child.on('message', (message) => (result = { value: message as T }));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (result !== undefined) resolve(result.value);
      else reject(new Error(`${module} ${args.join(' ')} exited with ${signal ?? code} and sent no result`));
    });
  });
}

/** Sends the result to the parent and lets the process end once it is delivered. */
export function sendToParent(value: unknown): void {
  if (process.send === undefined) {
    console.log(JSON.stringify(value, null, 2));
    return;
  }
  process.send(value, () => process.disconnect());
}
