import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** A redis-server this test run started, on a loopback port, with persistence off. */
export interface RedisServer {
  readonly port: number;
  readonly process: ChildProcess;
  /** Kills the server and waits until it has exited. */
  stop(): Promise<void>;
}

/** The servers speaking the Redis protocol that the suites start: Redis itself, and Valkey. */
export type RedisBinary = 'redis-server' | 'valkey-server';

/** True when the binary (by default `redis-server`) is on the PATH. */
export function hasRedisServer(binary: RedisBinary = 'redis-server'): boolean {
  try {
    execFileSync(binary, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A port free right now; with `withBus`, port + 10000 (the cluster bus) is free too. */
export async function freePort(withBus = false): Promise<number> {
  for (;;) {
    const port = await listenOnce(0);
    if (!withBus) return port;
    if (port + 10_000 <= 65_535 && (await listenOnce(port + 10_000).catch(() => 0)) !== 0) return port;
  }
}

function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const { port: bound } = server.address() as { port: number };
      server.close(() => resolve(bound));
    });
  });
}

/** Starts `redis-server` (or `valkey-server`) and resolves once it accepts connections. */
export async function startRedisServer(options: { port?: number; args?: string[]; cwd?: string; binary?: RedisBinary } = {}): Promise<RedisServer> {
  const binary = options.binary ?? 'redis-server';
  const port = options.port ?? (await freePort());
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...(options.args ?? [])];
  const child = spawn(binary, args, { cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Ready to accept connections')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`${binary} on port ${port} exited with code ${code}:\n${output}`)));
  });
  return {
    port,
    process: child,
    stop: async () => {
      process.off('exit', killOnExit);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
