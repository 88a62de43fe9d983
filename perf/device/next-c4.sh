# A later call (the parts of the thirty-seventh session's call 2 that the thirty-eighth moved out for ATTNBWD_CUDA_GQA_PV):
# with ROWS=${ROWS:-4} (call 1's winner), the late dWo's SM target beside the row kernel (auto's 66 below 2048 tokens,
# 84 from there was tuned with ROWS = 1) on the GEMM-path workloads, one round; gqa #13's attention paths (auto, small,
# kv) under today's defaults; the three-CTA dP + softmax kernel's occupancy (ncu at #0); racecheck on the dP + softmax
# and PV tests (plain GEMMs); groupeddx at 385 <= T < 2048 (never timed there).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
RW=${ROWS:-4}
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,8,10,12,13,15 --rounds 1 \
  --variant auto=$P,ATTNBWD_CUDA_GQA_ROWS=$RW --variant s84=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=84 \
  --variant s100=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=100 \
  --variant s116=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=116 --out $R/ab-rows-dwo.json > $R/ab-rows-dwo.txt 2>&1
echo "ab dwo rc=$? t=$SECONDS"; tail -14 $R/ab-rows-dwo.txt
# the attention paths re-timed at the small-T GEMM-path workloads under today's defaults (their choices date from
# before the late dWo's SM targets): #13 (B = 1, S = 256), auto against small / kv
ok && timeout $(tmo 90) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 13 --rounds 2 \
  --variant auto=$P --variant small=$P,ATTNBWD_CUDA_GQA_ATTN=small --variant kv=$P,ATTNBWD_CUDA_GQA_ATTN=kv \
  --out $R/ab-attn13.json > $R/ab-attn13.txt 2>&1
echo "ab attn rc=$? t=$SECONDS"; tail -6 $R/ab-attn13.txt
# on3's occupancy: 3 CTAs per SM only if the 76,800-byte layout plus the 1 KB reserve fits three times (a review found
# cuobjdump reporting 1 KB of static shared memory for every sm_90a kernel, taken to be that reserve: mha's occ3 with
# the same budget measured as one wave at 3 CTAs per SM)
ok && ATTNBWD_CUDA_GQA_DPSM=on3 timeout $(tmo 90) ncu --kernel-name regex:gqa_dp_softmax --launch-count 1 \
  --section Occupancy --section LaunchStats $P --clock=events --backend=cuda --ops=gqa_rope_backward --workloads=0 \
  > $R/ncu-on3-occupancy.txt 2>&1
echo "ncu rc=$? t=$SECONDS"; grep -E "Theoretical Occupancy|Block Limit (Shared|Registers)|Achieved Occupancy" \
  $R/ncu-on3-occupancy.txt | head -5
T=$M/attnbwd_tests
ok && ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout $(tmo 150) compute-sanitizer --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.DpSoftmaxKernel*:CudaGqaRope.PvOnTheSideStream*' > $R/racecheck-pv.txt 2>&1
echo "racecheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/racecheck-pv.txt | tail -3
# gqa's q/k/v path at 385 <= T < 2048 (auto: separate cuBLASLt pairs + add3) against groupeddx (one grouped dX-only
# sm_90a launch into grad_hidden_states, no add3, the weight gradients by cuBLASLt beside it), never timed there:
# #12 (T = 512), #0 (691), #1 (898), #4 (1024; measured 0.995x in the thirty-third session)
ok && timeout $(tmo 90) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 12,0,1,4 --rounds 2 \
  --variant auto=$P --variant gdx=$P,ATTNBWD_CUDA_GQA_QKV=groupeddx --out $R/ab-gdx.json > $R/ab-gdx.txt 2>&1
echo "ab gdx rc=$? t=$SECONDS"; tail -8 $R/ab-gdx.txt
fin
