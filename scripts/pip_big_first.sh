#!/usr/bin/env bash
# pip_big_first.sh PYTHON REQUIREMENT...: installs the large wheels (over 50 MB) that pip would
# install for REQUIREMENT... into PYTHON's environment, one pip call each, biggest first; the
# caller's own `pip install REQUIREMENT...` then brings the rest.
#
# PyPI's Linux torch pulls ~3 GiB of CUDA libraries as wheels. One pip call downloads every wheel
# before it installs any, so on a small disk the downloads (~3 GiB) sit beside the installed
# environment (~6.5 GiB). Taking the large wheels one at a time keeps the peak near the
# environment's own size. Nothing is cached (PIP_NO_CACHE_DIR).
set -euo pipefail
py=$1
shift
export PIP_NO_CACHE_DIR=1
plan=$(mktemp)
trap 'rm -f "$plan"' EXIT
"$py" -m pip install -q --dry-run --ignore-installed --report "$plan" "$@"
# Requirements pinned as name==version, biggest first (sizes from the index; unknown counts as 0).
big=$("$py" - "$plan" <<'EOF'
import json, sys, urllib.request
plan = json.load(open(sys.argv[1]))
rows = []
for item in plan["install"]:
    info = item["download_info"]
    url, meta = info["url"], item["metadata"]
    if not url.endswith(".whl") and ".whl#" not in url:
        continue
    name = meta["name"]
    size = 0
    req = urllib.request.Request(f"https://pypi.org/simple/{name.lower().replace('_', '-')}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
        fn = url.split("#")[0].rsplit("/", 1)[-1]
        size = next((f.get("size", 0) for f in files if f["filename"] == fn), 0)
    except Exception:
        pass
    if size > 50_000_000:
        rows.append((size, f"{name}=={meta['version']}"))
print(" ".join(spec for _, spec in sorted(rows, reverse=True)))
EOF
)
for spec in $big; do
  "$py" -m pip install -q --no-deps "$spec"
done
