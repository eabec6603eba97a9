import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../redis/helpers/redis-server';
import { postgresUser } from './postgres-server';

/** Where Debian's pgbouncer package puts the binary. */
const PGBOUNCER = '/usr/sbin/pgbouncer';

/** True when Debian's pgbouncer is installed. */
export function hasPgBouncer(): boolean {
  return existsSync(PGBOUNCER);
}

/** A PgBouncer this test run started, in transaction pooling mode, in front of one PostgreSQL server. */
export interface PgBouncerServer {
  readonly port: number;
  readonly process: ChildProcess;
  /** Stops it and removes its directory. */
  destroy(): Promise<void>;
}

/**
 * Starts PgBouncer on a free loopback port in front of the PostgreSQL server on `postgresPort`
 * (database `postgres`, user `postgres`, trust authentication), with `pool_mode = transaction`: a
 * server connection serves a client for one transaction only, so nothing a statement leaves on its
 * connection (a named prepared statement, a `SET` outside a transaction) may be relied on.
 * PgBouncer refuses to run as root: it runs as the `postgres` user when this process is root.
 */
export async function startPgBouncer(postgresPort: number): Promise<PgBouncerServer> {
  const dir = await mkdtemp(join(tmpdir(), 'ratekeeper-pgbouncer-'));
  try {
    const port = await freePort();
    const ini = join(dir, 'pgbouncer.ini');
    await writeFile(join(dir, 'users.txt'), '"postgres" ""\n');
    await writeFile(
      ini,
      [
        '[databases]',
        `postgres = host=127.0.0.1 port=${postgresPort} dbname=postgres user=postgres`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'users.txt')}`,
        'pool_mode = transaction',
        'max_client_conn = 1000',
        'default_pool_size = 40',
        // postgres.js sends these at startup; PgBouncer refuses a startup parameter it does not know.
        'ignore_startup_parameters = extra_float_digits,options',
        `logfile = ${join(dir, 'pgbouncer.log')}`,
      ].join('\n'),
    );
    const user = await postgresUser();
    if (user !== undefined) for (const file of [dir, ini, join(dir, 'users.txt')]) await chown(file, user.uid, user.gid);
    const child = spawn(PGBOUNCER, [ini], { stdio: ['ignore', 'ignore', 'pipe'], ...user });
    const killOnExit = () => child.kill('SIGKILL');
    process.once('exit', killOnExit);
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let output = '';
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await listening(port, child, () => output);
    return {
      port,
      process: child,
      destroy: async () => {
        process.off('exit', killOnExit);
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
        await exited;
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

/** Resolves once `port` accepts a connection; rejects if the process exits first, or after 10 s. */
async function listening(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const started = performance.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer on port ${port} exited with code ${child.exitCode}:\n${output()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.end();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (performance.now() - started > 10_000) throw new Error(`pgbouncer on port ${port} did not listen within 10 s:\n${output()}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
