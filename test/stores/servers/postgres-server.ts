import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../redis/helpers/redis-server';

const run = promisify(execFile);

/** Where Debian's postgresql-15 package puts the server binaries. */
export const POSTGRES_BIN = '/usr/lib/postgresql/15/bin';

/** A PostgreSQL cluster this test run created in a temporary directory, listening on a loopback port. */
export interface PostgresServer {
  readonly port: number;
  readonly process: ChildProcess;
  /** Stops the server (fast shutdown) and waits until it has exited; the data stays for `restart`. */
  stop(): Promise<void>;
  /** Starts the server again on the same port and data. */
  restart(): Promise<PostgresServer>;
  /** Stops the server and removes its data. */
  destroy(): Promise<void>;
}

/** True when Debian's PostgreSQL 15 server binaries are installed. */
export function hasPostgres(): boolean {
  return existsSync(join(POSTGRES_BIN, 'initdb')) && existsSync(join(POSTGRES_BIN, 'postgres'));
}

/** The `postgres` user's ids when this process is root (PostgreSQL and PgBouncer refuse to run as root); undefined otherwise. */
export async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const [{ stdout: uid }, { stdout: gid }] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
  return { uid: Number(uid), gid: Number(gid) };
}

/**
 * Creates a cluster with `initdb` (trust authentication, no fsync: the data is thrown away) and
 * starts `postgres` on a free loopback port, its socket in the same temporary directory.
 */
export async function startPostgres(): Promise<PostgresServer> {
  const dir = await mkdtemp(join(tmpdir(), 'ratekeeper-pg-'));
  try {
    const user = await postgresUser();
    if (user !== undefined) await chown(dir, user.uid, user.gid);
    await chmod(dir, 0o700);
    const data = join(dir, 'data');
    const initdb = [join(POSTGRES_BIN, 'initdb'), '-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale', 'C'];
    await (user === undefined ? run(initdb[0]!, initdb.slice(1)) : run('/usr/sbin/runuser', ['-u', 'postgres', '--', ...initdb]));
    return await launch(dir, data, await freePort(), user);
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

async function launch(dir: string, data: string, port: number, user: { uid: number; gid: number } | undefined): Promise<PostgresServer> {
  const settings = ['fsync=off', 'synchronous_commit=off', 'full_page_writes=off', 'max_connections=200', 'listen_addresses=127.0.0.1'];
  const args = ['-D', data, '-p', String(port), '-k', dir, ...settings.flatMap((setting) => ['-c', setting])];
  // Spawned under the postgres user's ids (not through runuser), so that signals reach the postmaster.
  const child = spawn(join(POSTGRES_BIN, 'postgres'), args, { stdio: ['ignore', 'pipe', 'pipe'], ...user });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let output = '';
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('database system is ready to accept connections')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`postgres on port ${port} exited with code ${code}:\n${output}`)));
  });
  const stop = async () => {
    process.off('exit', killOnExit);
    // SIGINT is a fast shutdown: every session ends at once.
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
    await exited;
  };
  return {
    port,
    process: child,
    stop,
    restart: () => launch(dir, data, port, user),
    destroy: async () => {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
