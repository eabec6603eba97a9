// Child process: end to end over HTTP. A node:http server (http-server.ts, each contender in its own
// process) limited by each contender over one redis-server spawned here, driven by autocannon from
// this process over loopback: 64 and then 256 connections, one request at a time each, every request
// from one of HTTP_USERS users (an `x-user` header). Interleaved rounds; run by run.ts. Run alone,
// `node --import tsx bench/http.ts <prefix>...` measures only the servers whose names start with a
// prefix (say `express-rate-limit` `@nestjs/throttler`) and prints the samples.
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { sendToParent } from './child';
import { HTTP_CONTENDERS, type HttpContender } from './http-server';
import { redisCpuUs } from './redis';
import { spawnRedis } from './redis-server';

/** Connections autocannon keeps open: as many requests in flight at once. */
export const HTTP_CONNECTIONS = [64, 256] as const;
export const HTTP_USERS = 10_000;
export const HTTP_ROUNDS = 3;
export const HTTP_SECONDS = 4;
const WARMUP_SECONDS = 1;

export interface HttpSample {
  readonly requestsPerSecond: number;
  /** Latency percentiles, ms (autocannon's histogram, whole ms). */
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly meanMs: number;
  /** Responses other than 2xx (there should be none: the rule refuses nobody at these rates). */
  readonly non2xx: number;
  /** The HTTP server's CPU per request (process.cpuUsage), µs: its own work, whatever the neighbours do. */
  readonly serverUs: number;
  /** Redis server CPU per request, µs. */
  readonly redisUs: number;
  /**
   * The load generator's CPU per request (this process, which runs autocannon), µs: the third
   * party on the same cores. With it, the CPU a request costs in all is known, and the ratio of
   * those totals is what requests/s would show if the cores were ours alone.
   */
  readonly loadGeneratorUs: number;
  /** Requests per script call (EVALSHA and EVAL): how many decisions a round trip carried. */
  readonly perScript: number;
}

export interface HttpResult {
  /** Samples per connection count, per server, one per round. */
  readonly samples: Record<number, Record<string, HttpSample[]>>;
}

/** The server's CPU time so far, µs. */
async function serverCpuUs(child: ChildProcess): Promise<number> {
  child.send('cpu');
  const [message] = (await once(child, 'message')) as [{ cpuUs: number }];
  return message.cpuUs;
}

async function startServer(contender: HttpContender, redisPort: number): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(fileURLToPath(new URL('./http-server.ts', import.meta.url)), [contender, String(redisPort)], {
    execArgv: process.execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  return { child, port: message.port };
}

/** Script calls (EVALSHA and EVAL) since the last CONFIG RESETSTAT. */
async function scriptCallCount(client: Redis): Promise<number> {
  const stats = (await client.info('commandstats')) as string;
  let calls = 0;
  for (const match of stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)) calls += Number(match[1]);
  return calls;
}

let user = 0;
const request = { method: 'GET' as const, path: '/', setupRequest: (req: Record<string, unknown>) => ({ ...req, headers: { 'x-user': `user:${user++ % HTTP_USERS}` } }) };

async function drive(port: number, connections: number, seconds: number): Promise<autocannon.Result> {
  return autocannon({ url: `http://127.0.0.1:${port}`, connections, pipelining: 1, duration: seconds, requests: [request] });
}

/** One timed autocannon run against one server, with the CPU it cost the server and Redis. */
async function sample(client: Redis, server: { child: ChildProcess; port: number }, connections: number): Promise<HttpSample> {
  await client.config('RESETSTAT');
  const redisCpu = await redisCpuUs(client);
  const serverCpu = await serverCpuUs(server.child);
  const generatorCpu = process.cpuUsage();
  const result = await drive(server.port, connections, HTTP_SECONDS);
  const generator = process.cpuUsage(generatorCpu);
  const requests = result.requests.total;
  const serverUs = ((await serverCpuUs(server.child)) - serverCpu) / requests;
  const redisUs = ((await redisCpuUs(client)) - redisCpu) / requests;
  const scriptCalls = await scriptCallCount(client);
  return {
    requestsPerSecond: requests / HTTP_SECONDS,
    p50Ms: result.latency.p50,
    p90Ms: result.latency.p90,
    p99Ms: result.latency.p99,
    meanMs: result.latency.average,
    non2xx: result.non2xx,
    serverUs,
    redisUs,
    loadGeneratorUs: (generator.user + generator.system) / requests,
    perScript: scriptCalls === 0 ? NaN : requests / scriptCalls,
  };
}

async function main(): Promise<void> {
  const redis = await spawnRedis();
  const client = new Redis({ port: redis.port, host: '127.0.0.1' });
  const servers = new Map<HttpContender, { child: ChildProcess; port: number }>();
  const prefixes = process.argv.slice(2);
  const contenders = HTTP_CONTENDERS.filter((name) => prefixes.length === 0 || prefixes.some((prefix) => name.startsWith(prefix)));
  try {
    for (const contender of contenders) servers.set(contender, await startServer(contender, redis.port));
    for (const { port } of servers.values()) await drive(port, HTTP_CONNECTIONS[0], WARMUP_SECONDS);
    const samples: Record<number, Record<string, HttpSample[]>> = {};
    for (const connections of HTTP_CONNECTIONS) {
      const level: Record<string, HttpSample[]> = Object.fromEntries(contenders.map((name) => [name, []]));
      for (let round = 0; round < HTTP_ROUNDS; round++) {
        for (let k = 0; k < contenders.length; k++) {
          const contender = contenders[(round + k) % contenders.length]!;
          level[contender]!.push(await sample(client, servers.get(contender)!, connections));
        }
      }
      samples[connections] = level;
    }
    sendToParent({ samples } satisfies HttpResult);
  } finally {
    for (const { child } of servers.values()) child.disconnect();
    client.disconnect();
    await redis.stop();
  }
}

if (process.argv[1]?.endsWith('http.ts')) await main();
