#!/usr/bin/env bash
# Fetches Debian's Prometheus server (the package, unpacked; nothing installed system-wide) into a cache outside the
# checkout, keyed by the package's version; a machine that fetched it already reuses it. Prints the binary's path.
set -euo pipefail
CACHE_ROOT="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}"
FOUND=$(ls -d "$CACHE_ROOT"/prometheus-*/.complete 2>/dev/null | head -1 || true)
if [ -n "$FOUND" ]; then echo "$(dirname "$FOUND")/usr/bin/prometheus"; exit 0; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && apt-get download prometheus >&2)
DEB=$(ls "$WORK"/prometheus_*.deb)
VERSION=$(basename "$DEB" .deb | cut -d_ -f2)
CACHE="$CACHE_ROOT/prometheus-$VERSION"
rm -rf "$CACHE"
mkdir -p "$CACHE"
dpkg-deb -x "$DEB" "$CACHE"
"$CACHE/usr/bin/prometheus" --version >&2
touch "$CACHE/.complete"
echo "$CACHE/usr/bin/prometheus"
