#!/usr/bin/env bash
# Installs what the full test suite needs and this machine lacks, on Debian 12 (bookworm) or a
# derivative: redis-server, valkey-server, PostgreSQL, PgBouncer and Chromium. Run as root (CI) or with sudo.
# Valkey is not in bookworm's default suites: it comes from bookworm-backports, whose sources entry
# is derived from the machine's own Debian entry (same mirror), so no host is written down here.
set -euo pipefail

sources=/etc/apt/sources.list.d/debian.sources
backports=/etc/apt/sources.list.d/bookworm-backports.sources

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
[ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
need_valkey=false
command -v valkey-server >/dev/null || need_valkey=true

if [ ${#missing[@]} -eq 0 ] && ! $need_valkey; then
  echo "install-test-servers: redis-server, valkey-server, postgresql-15, pgbouncer and chromium are installed"
  exit 0
fi

if $need_valkey && [ ! -e "$backports" ]; then
  if [ ! -r "$sources" ]; then
    echo "install-test-servers: $sources not found; add bookworm-backports to apt's sources by hand" >&2
    exit 1
  fi
  # The URIs and keyring of the stanza that carries the plain `bookworm` suite.
  entry=$(awk -v RS= '/(^|\n)Suites:([^\n]* )?bookworm( |\n|$)/ { print; exit }' "$sources")
  uris=$(sed -n 's/^URIs:[[:space:]]*//p' <<<"$entry")
  signed_by=$(sed -n 's/^Signed-By:[[:space:]]*//p' <<<"$entry")
  if [ -z "$uris" ]; then
    echo "install-test-servers: no stanza with Suites: bookworm in $sources" >&2
    exit 1
  fi
  {
    echo "Types: deb"
    echo "URIs: $uris"
    echo "Suites: bookworm-backports"
    echo "Components: main"
    [ -n "$signed_by" ] && echo "Signed-By: $signed_by"
  } >"$backports"
  echo "install-test-servers: added $backports (from $sources)"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-test-servers: installing ${missing[*]}"
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if $need_valkey; then
  echo "install-test-servers: installing valkey-server from bookworm-backports"
  apt-get install -y -qq -t bookworm-backports valkey-server >/dev/null
fi
# The packaged services are not wanted: the tests start their own servers on random loopback ports.
for service in redis-server valkey-server postgresql pgbouncer; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then systemctl stop "$service" || true; fi
done
