# Forty-fifth session, call 3: the two new autos (perf/NOTES.md, forty-fifth session).
# 1. Tests: gqa's DA forms (DaAutoWritesTheHeadsFromS256OnSm90 new), the real workloads, bits, malformed switches;
#    varlen's bias + RoPE, table, lt16/mixed and real-workload tests (auto now vec1 + side).
# 2. gqa: auto (one pointer-array batch into the heads at S >= 256 on sm_90) against DA=cublaslt (the copy) at the five
#    workloads it changes (#3 #9 #10 #14 #15), three rounds; #8 (S = 128, auto unchanged) as a control.
# 3. varlen: auto (vec1 + side) against the old auto (vec + main) over all 16, two rounds.
# 4. float64 PyTorch at gqa #9 #15 and varlen #2 #8 #10; memcheck on the DA auto and table tests; on an H200 the suites of gqa and varlen (two each).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaOutProj.*:CudaGqaRope.Da*:CudaGqaRope.RealWorkloads*:CudaGqaRope.RunsAreBitIdentical:CudaGqaRope.Malformed*:CudaVisionVarlenRope.Odd*:CudaVisionVarlenRope.BiasRope*:CudaVisionVarlenRope.BlockTable*:CudaVisionVarlenRope.Lt16*:CudaVisionVarlenRope.MixedQkv*:CudaVisionVarlenRope.RealWorkloads*' 120
abrun gqa_rope_backward 3,8,9,10,14,15 3 gqa-da-auto 70 auto=$P copy=$P,ATTNBWD_CUDA_GQA_DA=cublaslt
abrun vision_varlen_rope_backward all 2 varlen-auto 100 auto=$P old=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec,ATTNBWD_CUDA_VARLEN_TABLE=main
torch_check gqa_rope_backward 9
torch_check gqa_rope_backward 15
torch_check vision_varlen_rope_backward 2
torch_check vision_varlen_rope_backward 8
torch_check vision_varlen_rope_backward 10
sanitize memcheck 'CudaGqaRope.DaAuto*:CudaVisionVarlenRope.BlockTable*' da-table 60
case $GPU in *H200*)
  ok && PB suite-gqa-1 $P gqa_rope_backward all
  ok && PB suite-varlen-1 $P vision_varlen_rope_backward all
  ok && PB suite-gqa-2 $P gqa_rope_backward all
  ok && PB suite-varlen-2 $P vision_varlen_rope_backward all
  suite_e $R/suite-gqa-1.json $R/suite-gqa-2.json $R/suite-varlen-1.json $R/suite-varlen-2.json ;;
esac
fin
