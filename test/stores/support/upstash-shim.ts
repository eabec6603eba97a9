import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Redis } from 'ioredis';

/**
 * A loopback HTTP server speaking Upstash's REST protocol in front of a real redis-server, so that
 * the real `@upstash/redis` client runs against it with its defaults:
 * - `POST /` with a JSON array command answers `{"result": …}`, or `{"error": "…"}` with status 400;
 * - `POST /pipeline` takes an array of commands and answers an array of `{result}`/`{error}`
 *   (not atomic); `POST /multi-exec` runs them as one MULTI/EXEC transaction;
 * - `Authorization: Bearer <token>` is required (401 otherwise);
 * - with `Upstash-Encoding: base64` (the client's default) every string in a result, nested ones
 *   included, is sent base64-encoded, except the status reply "OK"; numbers and null go as they are.
 */
export async function startUpstashShim(redis: Redis, token: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((request, response) => {
    handle(redis, token, request, response).catch((error: unknown) => reply(response, 500, { error: String(error) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

type Command = [string, ...(string | number)[]];

async function handle(redis: Redis, token: string, request: IncomingMessage, response: ServerResponse): Promise<void> {
  if (request.headers.authorization !== `Bearer ${token}`) return reply(response, 401, { error: 'Unauthorized' });
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Command | Command[];
  const base64 = request.headers['upstash-encoding'] === 'base64';
  const encode = (value: unknown): unknown => {
    if (Buffer.isBuffer(value)) return base64 && value.toString() !== 'OK' ? value.toString('base64') : value.toString('utf8');
    return Array.isArray(value) ? value.map(encode) : value;
  };
  const run = (command: Command) => redis.callBuffer(command[0], ...command.slice(1).map(String));
  const settled = (promise: Promise<unknown>) => promise.then((result) => ({ result: encode(result) }), (error: Error) => ({ error: error.message }));
  const path = new URL(request.url ?? '/', 'http://shim').pathname;
  if (path === '/pipeline') return reply(response, 200, await Promise.all((body as Command[]).map((command) => settled(run(command)))));
  if (path === '/multi-exec') {
    const results = (await redis.multi((body as Command[]).map(([name, ...args]) => ['callBuffer', name, ...args.map(String)])).exec()) ?? [];
    return reply(response, 200, results.map(([error, result]) => (error ? { error: error.message } : { result: encode(result) })));
  }
  const outcome = await settled(run(body as Command));
  return reply(response, 'error' in outcome ? 400 : 200, outcome);
}

function reply(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}
