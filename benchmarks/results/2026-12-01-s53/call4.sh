#!/usr/bin/env bash
# Session 53, call 4 (as run, inline): the GPU model tests at GEN 35.
# Carry: .peers/models .gpu/gpu_lib.tar.xz .gpu/gpu_models_mace.tar.xz
GPU_TEST_LIMIT=480 bash tools/gpu_model_tests.sh > /tmp/mt.log 2>&1; echo rc=$?; grep -E "passed|failed|^FAILED|^ERROR" /tmp/mt.log | tail -8; mkdir -p $OUT/m; cp /tmp/mt.log $OUT/m/; cp -r ${OUT}/logs $OUT/m/ 2>/dev/null; (cd $OUT && tar czf m.tar.gz m && rm -rf m logs)
