// The processes of the in-flight race tests (Redis and PostgreSQL): each racer is a child process
// with its own client, started with `args`, which says it is ready, then races on 'go' and reports.
import { type ChildProcess, fork } from 'node:child_process';

/** The next message of `child`; rejects if it exits first. */
export function nextMessage(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`racer exited with code ${code}`)));
  });
}

/** Starts a racer process running the TypeScript file `racer` with `args`. */
export const startRacer = (racer: string, args: readonly string[]): ChildProcess => fork(racer, [...args], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });

/** Four racers started at once, let go together: what each reports (tasks granted, the most in flight it saw counted). */
export async function raceFour(racer: string, args: readonly string[]): Promise<{ granted: number; most: number }[]> {
  const children = Array.from({ length: 4 }, () => startRacer(racer, args));
  try {
    await Promise.all(children.map(nextMessage));
    const results = children.map(nextMessage);
    for (const child of children) child.send('go');
    return (await Promise.all(results)) as { granted: number; most: number }[];
  } finally {
    // A failed race leaves none of its processes behind.
    for (const child of children) if (child.exitCode === null) child.kill();
  }
}
