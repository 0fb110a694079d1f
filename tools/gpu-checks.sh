#!/bin/sh
# The GPU checks of a session, on the GPU machine from the repository root, with
# carry/gpu.tar.xz made here by tools/gpu-bundle.sh (--gst for e2e) from a CUDA build,
# the programs h3-bench, h3-generate and the GPU tests, and for the before/after timings
# a baseline build's h3-bench copied into the build as tools/h3-bench-old first:
#   tools/gpu-checks.sh tests attn vae e2e     (output under $OUT, the device tool's folder)
set -u
[ -d /tmp/g/bin ] || { mkdir -p /tmp/g && tar xJf carry/gpu.tar.xz -C /tmp/g; }
export LD_LIBRARY_PATH=/tmp/g/lib PATH=/tmp/g/bin:$PATH GST_PLUGIN_SYSTEM_PATH_1_0=/tmp/g/plugins \
  GST_PLUGIN_SCANNER_1_0=/tmp/g/bin/gst-plugin-scanner GST_REGISTRY_1_0=/tmp/g/registry.bin \
  GST_PLUGIN_PATH=/tmp/g/plugins H3_TEST_DATA=$PWD/tests/data
L=$OUT/gpu.log
log() { echo "== $* ($(date -u +%T))" | tee -a $L; }
for s in "$@"; do
  case $s in
  tests)
    nvidia-smi -L | tee -a $L
    for t in test_cuda_targets test_gpu_goldens test_cuda_fp8 test_gpu_stream test_gpu_lora; do
      log $t; timeout 280 /tmp/g/bin/$t > $OUT/$t.log 2>&1; echo "$t rc=$?" | tee -a $L; tail -3 $OUT/$t.log >> $L
    done
    log test_cuda_ops quick; H3_TEST_QUICK=1 timeout 400 /tmp/g/bin/test_cuda_ops > $OUT/test_cuda_ops.log 2>&1
    echo "test_cuda_ops rc=$?" | tee -a $L; tail -3 $OUT/test_cuda_ops.log >> $L ;;
  attn)
    for i in 1 2; do
      for b in h3-bench-old h3-bench; do
        log $b attention $i; timeout 250 /tmp/g/bin/$b --attention only --reference none --reps 20 >> $OUT/attn.txt 2>&1
        echo "== end $b $i" >> $OUT/attn.txt
      done
    done ;;
  vae)
    for b in h3-bench-old h3-bench; do
      log $b vae; timeout 280 /tmp/g/bin/$b --vae only --reference none --vae-reps 3 >> $OUT/vae.txt 2>&1
      echo "== end $b" >> $OUT/vae.txt
    done ;;
  e2e)
    log e2e; timeout 400 python3 tools/bench/h3_e2e.py --model tests/data/official --case fasth3-vsa-1280 \
      --case fasth3-fa-1280 >> $OUT/e2e.txt 2>&1; echo "e2e rc=$?" >> $L ;;
  esac
done
log done
