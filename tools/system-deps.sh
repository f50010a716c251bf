#!/usr/bin/env bash
# Installs the Debian packages the test suite needs when they are missing.
# Idempotent and quiet when everything is there; needs root (CI runs as root).
set -euo pipefail
missing=()
# The browser tests drive Debian's chromium with Playwright (nothing is downloaded).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# PostgresStore's tests start a throwaway server from initdb/pg_ctl (bench/pg_cluster.py);
# Debian keeps them off PATH, in /usr/lib/postgresql/<version>/bin.
{ [ -n "${PG_BINDIR:-}" ] || command -v initdb >/dev/null 2>&1 \
    || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; } || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "system-deps: missing ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "system-deps: installing ${missing[*]} with apt"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
