#!/usr/bin/env bash
# Installs what tileattn builds with on Debian 12 (skips what is already there).
set -euo pipefail
packages=(build-essential cmake ninja-build git python3 python3-venv python3-dev
          libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
