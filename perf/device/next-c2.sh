# Next session, call 2: depends on call 1. With ROWS=${ROWS:-4} (the winner of call 1; set ROWS=1 if none won): the
# late dWo's SM target beside the row kernel (auto's 66 below 2048 tokens, 84 from there was tuned with ROWS = 1), on
# the GEMM-path workloads, one round; the dP + softmax kernel at three CTAs per SM (ATTNBWD_CUDA_GQA_DPSM=on3, 5f4591d)
# against off and on, two rounds, and racecheck/memcheck on its tests; gqa #13's attention paths; groupeddx at
# 385 <= T < 2048. The suites are call 3 (next-c3.sh), after the winners are made auto and the bundle is remade.
# on3's prediction: the kernel 90.8 -> ~65-75 us at #0 (three warps per scheduler against 1.9, one wave of 396 slots
# for 352 CTAs); mha's occ3 gained only 2-4 % from the same step (perf/NOTES.md), so per call: on3 >= on everywhere,
# and ahead of off where on was within 3 % (#7, #1, #8).
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
RW=${ROWS:-4}
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,8,10,12,13,15 --rounds 1 \
  --variant auto=$P,ATTNBWD_CUDA_GQA_ROWS=$RW --variant s84=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=84 \
  --variant s100=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=100 \
  --variant s116=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=116 --out $R/ab-rows-dwo.json > $R/ab-rows-dwo.txt 2>&1
echo "ab dwo rc=$? t=$SECONDS"; tail -14 $R/ab-rows-dwo.txt
ok && timeout $(tmo 120) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,7,8,10,12,13,15 --rounds 2 \
  --variant off=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DPSM=off --variant on=$P,ATTNBWD_CUDA_GQA_DPSM=on \
  --variant on3=$P,ATTNBWD_CUDA_GQA_DPSM=on3 --out $R/ab-dpsm3.json > $R/ab-dpsm3.txt 2>&1
echo "ab dpsm3 rc=$? t=$SECONDS"; tail -14 $R/ab-dpsm3.txt
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
# gqa's q/k/v path at 385 <= T < 2048 (auto: separate cuBLASLt pairs + add3) against groupeddx (one grouped dX-only
# sm_90a launch into grad_hidden_states, no add3, the weight gradients by cuBLASLt beside it), never timed there:
# #12 (T = 512), #0 (691), #1 (898), #4 (1024; measured 0.995x in the thirty-third session)
ok && timeout $(tmo 90) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 12,0,1,4 --rounds 2 \
  --variant auto=$P --variant gdx=$P,ATTNBWD_CUDA_GQA_QKV=groupeddx --out $R/ab-gdx.json > $R/ab-gdx.txt 2>&1
echo "ab gdx rc=$? t=$SECONDS"; tail -8 $R/ab-gdx.txt
T=$M/attnbwd_tests
ok && timeout $(tmo 90) compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaGqaRope.DpSoftmaxKernel*' \
  > $R/memcheck-dpsm3.txt 2>&1
echo "memcheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-dpsm3.txt | tail -3
ok && ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout $(tmo 150) compute-sanitizer --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.DpSoftmaxKernel*' > $R/racecheck-dpsm3.txt 2>&1
echo "racecheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/racecheck-dpsm3.txt | tail -3
fin
