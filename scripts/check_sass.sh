#!/usr/bin/env bash
# check_sass.sh BUILD_DIR: the sm90 forward kernels keep their wgmma descriptors in uniform
# registers (scripts/check_sass.py reads the SASS of the build's sm90 forward object). Uses the
# toolkit's cuobjdump and nvdisasm, or NVIDIA's wheels of the two (PyPI, ~6 MB) in BUILD_DIR.
set -euo pipefail
build=${1:?usage: check_sass.sh BUILD_DIR}
obj=$build/src/CMakeFiles/tileattn.dir/cuda/sm90/forward.cu.o
[[ -f $obj ]] || { echo "check_sass: no $obj (a build without CUDA)"; exit 0; }
if ! command -v cuobjdump >/dev/null || ! command -v nvdisasm >/dev/null; then
  tools=$build/sass_tools
  found() { [[ -n $(find "$tools" -name cuobjdump -type f 2>/dev/null) && -n $(find "$tools" -name nvdisasm -type f 2>/dev/null) ]]; }
  if ! found; then
    rm -rf "$tools"
    if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --target "$tools" \
      "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14" || ! found; then
      echo "check_sass: SKIPPED: no cuobjdump / nvdisasm here, and NVIDIA's wheels could not be installed"
      exit 0
    fi
  fi
  for tool in cuobjdump nvdisasm; do
    bin=$(dirname "$(find "$tools" -name "$tool" -type f | head -1)")
    chmod +x "$bin/$tool"
    export PATH=$bin:$PATH
  done
fi
python3 "$(dirname "$0")/check_sass.py" "$obj"
