# Next session, call 1 (planned at the end of the forty-third session; perf/NOTES.md, its last section). The forty-third
# session's gqa defaults (DWO_TUNE and DA_ROWS auto rules) were measured on H100s only. 1. On an H200: gqa suites of the
# bundle (issue 6's figure; the fortieth session's 0.5442 before them). 2. The three tests rewritten on
# check_each_value after the session's last GPU test run. 3. perf/probes/cublaslt_da_pointer_array.cu: dA by one
# pointer-array batch of B·Hq GEMMs straight into dO against the strided dA + head_split copy (10-22 µs at the six
# large-B workloads) — whether cuBLASLt's pointer-array kernels on sm_90 keep the strided ones' rate. Count: if the
# direct form's best is within the copy's cost of the strided dA's, ~+0.5 % of gqa's geomean is there. 4. s43-c8.sh's
# A/Bs: DWO_SMS 66 / 100 / off against auto at #3 #8 #10 #15; mha LT_TUNE=main over the 16.
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
case $GPU in *H200*)
  ok && PB suite-gqa-1 $P gqa_rope_backward all
  ok && PB suite-gqa-2 $P gqa_rope_backward all
  suite_e $R/suite-gqa-1.json $R/suite-gqa-2.json ;;
esac
shards 'CudaGqaRope.DwoSm*:CudaGqaRope.DwoFirst*:CudaGqaRope.DaRow*' 60
ok && nvcc -std=c++20 -O2 -arch=sm_90a -o /tmp/probe_pa perf/probes/cublaslt_da_pointer_array.cu -lcublasLt \
  && timeout "$(tmo 90)" /tmp/probe_pa > "$R/probe-da-pointer-array.txt" 2>&1
echo "probe rc=$? t=$SECONDS"; cat "$R/probe-da-pointer-array.txt"
abrun gqa_rope_backward 3,8,10,15 3 dwo-sms 110 auto=$P sms66=$P,ATTNBWD_CUDA_GQA_DWO_SMS=66 \
  sms100=$P,ATTNBWD_CUDA_GQA_DWO_SMS=100 off=$P,ATTNBWD_CUDA_GQA_DWO_SMS=off
abrun vision_mha_norm_backward all 2 mha-main 140 auto=$P main=$P,ATTNBWD_CUDA_LT_TUNE=main
fin
