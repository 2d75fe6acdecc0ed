#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: runs the GPU tests, then times both kernels
# of every format at 64k tokens against a device-to-device copy. Without a GPU the tests skip.
# The tests (GpuTest.*):
#   * device output bit-identical to the host executor for both kernels x every record
#     format (every row of k_record_formats: b12x-432, b12x-368, b12x-304, flashmla-352, and
#     the page-major flashinfer-dsv4-384 and flashmla-v41-288 on examples/dsv4-mini, with
#     duplicate slots) x every latent-scale mode it takes
#     (identity, dynamic, per-token), on random data and on adversarial data (every bf16 pattern, NaN, infinities,
#     subnormals, zero blocks, tiny and huge latent scales, records of random bytes);
#   * the identity guard on the device;
#   * MUFU.RCP (-use_fast_math's 1.0f / x) on every E4M3 scale value against rn(1 / x): the
#     one step of FlashInfer's 384-byte writer jitcache's twin replaces (printed);
#   * exhaustive checks of every hardware path the kernels use in place of the host's
#     software: the E4M3 block-scale conversion on all non-negative fp32 inputs, E4M3
#     decoding of every code, bf16 rounding of all 2^32 fp32 inputs, the packed bf16
#     comparisons and max on all 2^32 pairs, the gather's dequantization of every scale
#     byte x code byte (identity and a spread of latent scales) and of every fp8 RoPE code
#     pair. Each runs in well under a second on an H200; the whole check takes a few
#     minutes, most of it building and the host executor's side of the comparisons.
#
#   scripts/gpu_check.sh              builds first (scripts/build.sh; needs apt-get)
#   scripts/gpu_check.sh --prebuilt   uses .gpu-bundle/ from scripts/gpu_bundle.sh, for a
#                                     machine without network (the device tool's)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache="$(mktemp -d)/cache"

if [ "${1:-}" = "--prebuilt" ]; then
  bundle=$root/.gpu-bundle
  [ -x "$bundle/bin/test_runtime" ] || { echo "gpu_check: no $bundle; run scripts/gpu_bundle.sh first" >&2; exit 2; }
  # NVRTC comes from this machine's CUDA toolkit (or the pip wheel of it).
  nvrtc_dirs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libnvrtc.so.13" ] && nvrtc_dirs="$nvrtc_dirs:$d"
  done
  wheel=$(python3 -c 'import nvidia.cuda_nvrtc as m, os; print(os.path.join(os.path.dirname(m.__file__), "lib"))' 2>/dev/null || true)
  [ -n "$wheel" ] && nvrtc_dirs="$nvrtc_dirs:$wheel"
  export LD_LIBRARY_PATH="$bundle/lib$nvrtc_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! "$bundle/bin/test_runtime" --gtest_list_tests >/dev/null 2>&1; then
    echo "==> the programs do not start with this machine's libstdc++; using the bundled one"
    export LD_LIBRARY_PATH="$bundle/compat:$LD_LIBRARY_PATH"
  fi
  if ! "$bundle/bin/test_runtime" --gtest_list_tests >/dev/null; then
    ldd "$bundle/bin/test_runtime" | grep -i "not found" >&2 || true
    echo "gpu_check: the bundled programs cannot start here" >&2
    exit 2
  fi
  export JCTEST_SOURCE_DIR=$root  # the tests read examples/ and golden files from here
  test_runtime=$bundle/bin/test_runtime
  bench=$bundle/bin/bench_gpu_kernels
else
  scripts/build.sh
  test_runtime=build/tests/test_runtime
  bench=build/bench/bench_gpu_kernels
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
started=$SECONDS
JITCACHE_DIR="$cache" "$test_runtime" --gtest_filter='GpuTest.*:GpuChecks.*:RuntimeTest.*' --gtest_color=no
echo "==> GPU tests: $((SECONDS - started)) s"
"$bench" examples/glm5-mini examples/dsv4-mini
