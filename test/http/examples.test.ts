import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { describe, expect, it } from 'vitest';
import { app as expressApp } from '../../examples/express';
import { app as fastifyApp } from '../../examples/fastify';
import { app as honoApp } from '../../examples/hono';
import { listening } from './support/servers';

// The examples export their apps and listen only when run directly; here each is put on a loopback
// port and checked to do what its comment says. Their limiters read the real clock, so the checks
// stay within what a few milliseconds cannot change.

async function withServer(listen: () => Promise<AddressInfo>, close: () => Promise<void>, body: (url: string) => Promise<void>) {
  const { port } = await listen();
  try {
    await body(`http://127.0.0.1:${port}`);
  } finally {
    await close();
  }
}

describe('examples', () => {
  it('express: five per minute per client, the health check never limited', async () => {
    const server = expressApp.listen(0, '127.0.0.1');
    await withServer(
      () => listening(server),
      () => new Promise((resolve) => server.close(() => resolve())),
      async (url) => {
        const statuses = [];
        for (let i = 0; i < 6; i++) statuses.push((await fetch(url)).status);
        expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
        expect((await fetch(`${url}/health`)).status).toBe(200);
      },
    );
  });

  it('fastify: limited per API key, with searches costing 5 of 10', async () => {
    await withServer(
      async () => (await fastifyApp.listen({ port: 0, host: '127.0.0.1' }), fastifyApp.server.address() as AddressInfo),
      () => fastifyApp.close(),
      async (url) => {
        const search = await fetch(`${url}/search`, { headers: { 'x-api-key': 'k1' } });
        expect(search.headers.get('ratelimit')).toMatch(/^limit=10, remaining=5, reset=\d+$/);
        const other = await fetch(url, { headers: { 'x-api-key': 'k2' } });
        expect(other.headers.get('ratelimit')).toMatch(/^limit=10, remaining=9, reset=\d+$/);
      },
    );
  });

  it('hono: /api/* is limited with the custom refusal, / is not', async () => {
    const server = serve({ fetch: honoApp.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
    await withServer(
      () => listening(server),
      () => new Promise((resolve) => server.close(() => resolve())),
      async (url) => {
        const responses = [];
        for (let i = 0; i < 3; i++) responses.push(await fetch(`${url}/api/time`));
        expect(responses.map((r) => r.status)).toEqual([200, 200, 429]);
        expect(await responses[2]?.json()).toMatchObject({ error: 'slow down' });
        expect(responses[2]?.headers.get('retry-after')).toMatch(/^\d+$/);
        const root = await fetch(url);
        expect([root.status, root.headers.get('ratelimit')]).toEqual([200, null]);
      },
    );
  });
});
