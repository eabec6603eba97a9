type Bag = Record<string, unknown>;

function bag(value: unknown): Bag | undefined {
  return value !== null && typeof value === 'object' ? (value as Bag) : undefined;
}

/**
 * Finds the peer address in what a Fetch-API server passes its handler next to the `Request`
 * (Hono calls it `c.env`), since a `Request` itself carries none. Recognized, by shape only so
 * that no runtime is imported:
 * - `@hono/node-server`: `{ incoming }`, a Node `IncomingMessage` whose socket has the address;
 * - Bun: the `Server`, whose `requestIP(request)` returns `{ address }`;
 * - Deno: `ServeHandlerInfo`, whose `remoteAddr.hostname` is the address.
 * Each may also sit under a `server` property, as some adapters nest it.
 */
export function runtimePeer(context: unknown, request: Request): string | undefined {
  const outer = bag(context);
  return peerIn(outer, request) ?? peerIn(bag(outer?.['server']), request);
}

function peerIn(holder: Bag | undefined, request: Request): string | undefined {
  if (holder === undefined) return undefined;
  const node = bag(bag(holder['incoming'])?.['socket'])?.['remoteAddress'];
  if (typeof node === 'string') return node;
  const requestIP = holder['requestIP'];
  if (typeof requestIP === 'function') {
    const bun = bag(requestIP.call(holder, request))?.['address'];
    if (typeof bun === 'string') return bun;
  }
  const deno = bag(holder['remoteAddr'])?.['hostname'];
  return typeof deno === 'string' ? deno : undefined;
}
