#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the C++ tests (CUDA code compiled when nvcc is
# there; GPU tests run only where a GPU is), the Python tests, and the CPU suite once more under
# AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)

echo "== Budget: formatting, file sizes, generated code"
bash scripts/check_budget.sh

echo "== C++: configure, build, test (Release)"
cmake --preset release
cmake --build --preset release -j "$jobs"
ctest --preset release
if [[ -f build/release/src/CMakeFiles/tileattn.dir/cuda/sm90/bwd.cu.o ]]; then
  bash scripts/check_wgmma.sh build/release  # ptxas serializes no sm90 wgmma
  bash scripts/check_sass.sh build/release  # wgmma descriptors in uniform registers
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ctest --test-dir build/release -L cuda --output-on-failure  # the GPU tests, on a GPU
fi

echo "== C++: install, then build the example as an outside project through find_package"
cmake --install build/release --prefix build/install >/dev/null
cmake -S examples/cpp -B build/example -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/example
./build/example/example

echo "== Python: install into a virtual environment, pytest"
python3 -m venv build/venv
build/venv/bin/python -m pip install -q --upgrade pip
# The CUDA kernels were compile-checked above; the Python build compiles them again only
# where a GPU can run them.
cuda=OFF
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
bash scripts/pip_big_first.sh build/venv/bin/python ".[test,train,jax]"  # torch's CUDA wheels, one at a time
CMAKE_BUILD_PARALLEL_LEVEL=$jobs PIP_NO_CACHE_DIR=1 build/venv/bin/python -m pip install -q ".[test,train,jax]" \
  -C cmake.define.TILEATTN_CUDA=$cuda
build/venv/bin/python -m pytest -q tests/python

echo "== C++ under AddressSanitizer + UndefinedBehaviorSanitizer (CPU)"
cmake --preset asan
cmake --build --preset asan -j "$jobs"
ctest --preset asan
