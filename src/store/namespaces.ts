/**
 * The key namespaces (`prefix [+ name + ':'] + algorithm + ':' + limit + '/' + windowMs + ':'`) the
 * limiters of this process use, per client object. Two limiters whose namespaces are equal share
 * every key's count; when one namespace starts with the other, some keys of one are keys of the
 * other. Either is what two limiters meant for different things ("login" and "search", both
 * 5/minute) do without a `name`, silently; so it is reported once, as express-rate-limit reports a
 * store used twice. Limiters given the same `name` share on purpose and are not reported.
 *
 * A report, not an error: a process may well build a limiter again on purpose (a test's
 * `beforeEach`, a module reloaded in development), and which limiters are still alive is up to the
 * garbage collector, so an error could not be raised reliably.
 */
const claimed = new WeakMap<object, Map<string, Claim>>();

interface Claim {
  /** Whether the limiter was given a `name`. */
  readonly named: boolean;
  /** Whether an overlap with this namespace was reported already. */
  reported: boolean;
}

/** Records that a limiter on `client` uses `namespace` (`named` when a `name` was given), reporting an overlap once. */
export function claimNamespace(client: object, namespace: string, named: boolean, limiter: string, warn: (message: string) => void): void {
  let namespaces = claimed.get(client);
  if (namespaces === undefined) claimed.set(client, (namespaces = new Map()));
  const same = namespaces.get(namespace);
  if (same !== undefined) {
    if (!(named && same.named) && !same.reported) {
      same.reported = true;
      warn(shared(namespace, limiter));
    }
    return;
  }
  const claim: Claim = { named, reported: false };
  for (const [other, otherClaim] of namespaces) {
    if (!(other.startsWith(namespace) || namespace.startsWith(other))) continue;
    const [outer, inner] = other.length < namespace.length ? [other, namespace] : [namespace, other];
    claim.reported = otherClaim.reported = true;
    warn(
      `ratekeeper: the keys of the ${limiter} under ${JSON.stringify(inner)} are also keys of the one under ${JSON.stringify(outer)}, ` +
        "so a key chosen to match can spend the other's counts. Give them prefixes (or names) where neither starts with the other.",
    );
    break;
  }
  namespaces.set(namespace, claim);
}

function shared(namespace: string, limiter: string): string {
  return (
    `ratekeeper: two ${limiter}s on one client count under ${JSON.stringify(namespace)} (the same prefix and algorithm: keys no longer name their rule, so limiters with different rules meet too), so they share every key's count. ` +
    'If they limit different things, give each its own `name`; to share on purpose, give both the same `name`.'
  );
}
