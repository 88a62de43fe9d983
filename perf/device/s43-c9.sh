# Forty-third session, call 9 (bundle of e13f4ee; a short form of s43-c8.sh after a refused start left ~360 s): on an
# H200, gqa suites (new defaults, old, new) first; then the three tests rewritten on one helper (check_each_value);
# then DWO_SMS 66 / 100 / off against auto at #3 #8 #10 #15, two rounds.
source perf/device/common.sh
LIMIT=${LIMIT:-110}
P=$M/attnbwd_perf
case $GPU in *H200*)
  ok && PB suite-gqa-new-1 $P gqa_rope_backward all
  ok && PB suite-gqa-old-1 $P gqa_rope_backward all ATTNBWD_CUDA_GQA_DWO_TUNE=on ATTNBWD_CUDA_GQA_DA_ROWS=off
  ok && PB suite-gqa-new-2 $P gqa_rope_backward all
  suite_e $R/suite-gqa-new-1.json $R/suite-gqa-old-1.json $R/suite-gqa-new-2.json ;;
esac
shards 'CudaGqaRope.DwoSm*:CudaGqaRope.DwoFirst*:CudaGqaRope.DaRow*' 40
abrun gqa_rope_backward 3,8,10,15 2 dwo-sms 60 auto=$P sms66=$P,ATTNBWD_CUDA_GQA_DWO_SMS=66 \
  sms100=$P,ATTNBWD_CUDA_GQA_DWO_SMS=100 off=$P,ATTNBWD_CUDA_GQA_DWO_SMS=off
fin
