import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, type RedisBinary, type RedisServer, startRedisServer } from './redis-server';

const run = promisify(execFile);

/** A real three-master Redis (or Valkey) Cluster on loopback ports, built with `redis-cli --cluster create` (or `valkey-cli`). */
export interface RedisCluster {
  readonly ports: number[];
  stop(): Promise<void>;
}

export async function startRedisCluster(binary: RedisBinary = 'redis-server'): Promise<RedisCluster> {
  const cli = binary === 'valkey-server' ? 'valkey-cli' : 'redis-cli';
  const dir = await mkdtemp(join(tmpdir(), 'ratekeeper-cluster-'));
  const servers: RedisServer[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      const port = await freePort(true);
      servers.push(
        await startRedisServer({ port, cwd: dir, binary, args: ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '5000'] }),
      );
    }
    const ports = servers.map((server) => server.port);
    await run(cli, ['--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`), '--cluster-replicas', '0', '--cluster-yes']);
    // `create` returns once slots are assigned; each node must also see the cluster as healthy.
    for (const port of ports) {
      for (let tries = 0; ; tries++) {
        const { stdout } = await run(cli, ['-p', String(port), 'cluster', 'info']);
        if (stdout.includes('cluster_state:ok')) break;
        if (tries > 100) throw new Error(`node ${port} never reported cluster_state:ok:\n${stdout}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    return { ports, stop: () => stopAll(servers, dir) };
  } catch (error) {
    await stopAll(servers, dir);
    throw error;
  }
}

async function stopAll(servers: RedisServer[], dir: string): Promise<void> {
  await Promise.all(servers.map((server) => server.stop()));
  await rm(dir, { recursive: true, force: true });
}
