#!/usr/bin/env bash
# Builds the engine's batch sealer (native/sealer.c) into .tools/native/, named by a hash of its source and of the
# node it is built for, so an unchanged source is not rebuilt. Needs only a C compiler and node's own headers; when
# either is missing it says so and the engine keeps its pure-JS path (same bytes, slower).
set -euo pipefail
cd "$(dirname "$0")/.."

src=native/sealer.c
node_bin=$(command -v node)
include=${NODE_INCLUDE:-$(dirname "$(dirname "$node_bin")")/include/node}
[ -f "$include/node_api.h" ] || include=/usr/include/node
cc_bin=${CC:-cc}
if ! command -v "$cc_bin" >/dev/null || [ ! -f "$include/node_api.h" ] || [ ! -f "$include/openssl/evp.h" ]; then
  echo "build-native: no C compiler or node headers; the engine uses its pure-JS sealer" >&2
  exit 0
fi
hash=$( (cat "$src"; node --version; node -p process.arch) | sha256sum | cut -c1-16)
out=.tools/native/sealer-$hash.node
if [ -f "$out" ]; then
  ln -sfn "$(basename "$out")" .tools/native/sealer.node
  echo "build-native: $out is up to date"
  exit 0
fi
mkdir -p .tools/native
tmp=$(mktemp .tools/native/sealer.XXXXXX)
if "$cc_bin" -O2 -shared -fPIC -Wall -Werror -Wno-deprecated-declarations -I"$include" "$src" -o "$tmp"; then
  mv "$tmp" "$out"
  ln -sfn "$(basename "$out")" .tools/native/sealer.node
  echo "build-native: built $out"
else
  rm -f "$tmp"
  echo "build-native: the compile failed; the engine uses its pure-JS sealer" >&2
fi
