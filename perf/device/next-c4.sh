# A later call (after next-c1..c3; ROWS=${ROWS:-4}, call 1's winner):
# 1. The key-major path's k/v weight gradients under the dQ GEMM (ATTNBWD_CUDA_GQA_KVW=under, thirty-eighth session)
#    on #4, #6, #9, #14: after against under at KVW_SMS 66 (auto), 44 and 88, and under with O on the side stream too
#    (PV=side, if call 2 kept it or not: both are measured here), two rounds. Prediction: -20 to -45 us at #6 and #9
#    (43-86 GFLOP of weight gradients moved under the DRAM-bound dQ GEMM), less at #14 and #4.
# 2. racecheck on the dP + softmax, PV and KVW tests (plain GEMMs).
# 3. groupeddx at 385 <= T < 2048 (never timed there): #12, #0, #1, #4.
# 4. on3's occupancy (ncu at #0); the late dWo's SM target re-swept with the winning ROWS, one round.
source perf/device/common.sh
LIMIT=${LIMIT:-540}
P=$M/attnbwd_perf
RW=${ROWS:-4}
K=ATTNBWD_CUDA_GQA_KVW
ok && timeout $(tmo 130) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 4,6,9,14 --rounds 2 \
  --variant after=$P --variant under=$P,$K=under --variant u44=$P,$K=under,${K}_SMS=44 \
  --variant u88=$P,$K=under,${K}_SMS=88 --variant underpv=$P,$K=under,ATTNBWD_CUDA_GQA_PV=side \
  --out $R/ab-kvw.json > $R/ab-kvw.txt 2>&1
echo "ab kvw rc=$? t=$SECONDS"; tail -10 $R/ab-kvw.txt
T=$M/attnbwd_tests
ok && ATTNBWD_CUDA_SANITIZE_GEMM=plain timeout $(tmo 150) compute-sanitizer --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='CudaGqaRope.DpSoftmaxKernel*:CudaGqaRope.PvOnTheSideStream*:CudaGqaRope.KvWeightGradientsUnder*' \
  > $R/racecheck-pv.txt 2>&1
echo "racecheck rc=$? t=$SECONDS"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/racecheck-pv.txt | tail -3
# gqa's q/k/v path at 385 <= T < 2048 (auto: separate cuBLASLt pairs + add3) against groupeddx (one grouped dX-only
# sm_90a launch into grad_hidden_states, no add3, the weight gradients by cuBLASLt beside it), never timed there:
# #12 (T = 512), #0 (691), #1 (898), #4 (1024; measured 0.995x in the thirty-third session)
ok && timeout $(tmo 90) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 12,0,1,4 --rounds 2 \
  --variant auto=$P --variant gdx=$P,ATTNBWD_CUDA_GQA_QKV=groupeddx --out $R/ab-gdx.json > $R/ab-gdx.txt 2>&1
echo "ab gdx rc=$? t=$SECONDS"; tail -8 $R/ab-gdx.txt
# on3's occupancy: 3 CTAs per SM only if the 76,800-byte layout plus the 1 KB reserve fits three times (a review found
# cuobjdump reporting 1 KB of static shared memory for every sm_90a kernel, taken to be that reserve: mha's occ3 with
# the same budget measured as one wave at 3 CTAs per SM)
ok && ATTNBWD_CUDA_GQA_DPSM=on3 timeout $(tmo 60) ncu --kernel-name regex:gqa_dp_softmax --launch-count 1 \
  --section Occupancy --section LaunchStats $P --clock=events --backend=cuda --ops=gqa_rope_backward --workloads=0 \
  > $R/ncu-on3-occupancy.txt 2>&1
echo "ncu rc=$? t=$SECONDS"; grep -E "Theoretical Occupancy|Block Limit (Shared|Registers)|Achieved Occupancy" \
  $R/ncu-on3-occupancy.txt | head -5
ok && timeout $(tmo 150) python3 perf/scripts/ab.py --op gqa_rope_backward --workloads 0,1,3,8,10,12,13,15 --rounds 1 \
  --variant auto=$P,ATTNBWD_CUDA_GQA_ROWS=$RW --variant s84=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=84 \
  --variant s100=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=100 \
  --variant s116=$P,ATTNBWD_CUDA_GQA_ROWS=$RW,ATTNBWD_CUDA_GQA_DWO_SMS=116 --out $R/ab-rows-dwo.json > $R/ab-rows-dwo.txt 2>&1
echo "ab dwo rc=$? t=$SECONDS"; tail -14 $R/ab-rows-dwo.txt
fin
