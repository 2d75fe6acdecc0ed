#!/usr/bin/env bash
# Packs the GPU check's programs into .gpu-bundle/ for a GPU machine that cannot build
# them. The machines the device tool lends have the CUDA toolkit but no network, so
# scripts/build.sh cannot install this project's Debian build dependencies there. Run
# this here, carry .gpu-bundle along, and run `scripts/gpu_check.sh --prebuilt` there:
#   bin/     test_runtime, bench_gpu_kernels, rcp_table and the jitcache CLI, debug info
#            stripped, and the tool worker they run kernels from outside in (found beside them)
#   lib/     libjitcache.so.1 (for the torch check's Python package, scripts/gpu_torch_check.py)
#            and the shared libraries they all need beyond the C library and NVRTC (the GPU
#            machine's CUDA toolkit has NVRTC)
#   compat/  this machine's libstdc++ and libgcc_s, used only when the GPU machine's are
#            too old for the programs
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
out=.gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/compat"
for program in build/tests/test_runtime build/bench/bench_gpu_kernels build/bench/rcp_table build/tools/jitcache \
  build/tools/jitcache-tool-worker; do
  strip --strip-debug -o "$out/bin/$(basename "$program")" "$program"
done
strip --strip-debug -o "$out/lib/libjitcache.so.1" build/libjitcache.so.1
ldd "$out"/bin/* "$out/lib/libjitcache.so.1" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*) ;;
      libnvrtc*) ;;
      libstdc++.so.* | libgcc_s.so.*) cp -L "$path" "$out/compat/$name" ;;
      *) cp -L "$path" "$out/lib/$name" ;;
    esac
  done
echo "==> $out: $(du -sh "$out" | cut -f1)"
ls -l "$out"/bin "$out"/lib "$out"/compat
