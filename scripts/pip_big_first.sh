#!/usr/bin/env bash
# pip_big_first.sh PYTHON REQUIREMENT...: installs the large wheels (over 50 MB) that pip would
# install for REQUIREMENT... into PYTHON's environment (those it lacks), one pip call each,
# biggest first; the caller's own `pip install REQUIREMENT...` then brings the rest.
#
# PyPI's Linux torch pulls ~3 GiB of CUDA libraries as wheels. One pip call downloads every wheel
# before it installs any, so on a small disk the downloads (~3 GiB) sit beside the installed
# environment (~6.5 GiB). Taking the large wheels one at a time keeps the peak near the
# environment's own size. Nothing is cached (PIP_NO_CACHE_DIR). Sizes come from HEAD requests to
# the index pip chose; when one fails, it says so and leaves the rest to the caller's one call.
set -euo pipefail
py=$1
shift
export PIP_NO_CACHE_DIR=1
plan=$(mktemp)
trap 'rm -f "$plan"' EXIT
"$py" -m pip install -q --dry-run --report "$plan" "$@"
# The planned wheels' URLs over 50 MB, biggest first.
big=$("$py" - "$plan" <<'PYEOF'
import json, sys, urllib.request
rows = []
for item in json.load(open(sys.argv[1])).get("install", []):
    url = item.get("download_info", {}).get("url", "").split("#")[0]
    if not url.endswith(".whl") or not url.startswith("http"):
        continue
    try:
        head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=20)
        size = int(head.headers.get("Content-Length") or 0)
    except Exception as err:
        print(f"pip_big_first: no size for {url} ({err}); the rest in one pip call", file=sys.stderr)
        break
    if size > 50_000_000:
        rows.append((size, url))
print("\n".join(url for _, url in sorted(rows, reverse=True)))
PYEOF
)
for url in $big; do
  "$py" -m pip install -q --no-deps "$url"
done
