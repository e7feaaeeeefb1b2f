#!/usr/bin/env bash
# Sets up, builds and runs the main demo: eager (S and P materialized) against tiled attention.
# Extra arguments go to `tileattn demo` (see docs/cli.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target tileattn_cli
./build/release/tools/tileattn demo "$@"
