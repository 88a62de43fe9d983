# Next session, call 1 (written in the forty-fifth session; perf/NOTES.md, its section). Before it:
#   git apply perf/device/s45-autos.patch   (gqa DA auto = one pointer-array batch into the heads from S = 256 on sm_90;
#                                            varlen BIASROPE auto = vec1, TABLE auto = side; the test DaAutoWrites...)
#   bash cmake/dev.sh build-cuda            (a fresh checkout: ~10-15 min on 2 cores)
#   bash perf/device/bundle.sh
#   run(command="LIMIT=480 bash perf/device/next-c1.sh", carry=[".carry"])
# If every test passes and the A/Bs agree with the forty-fifth session's (gqa auto/copy 1.001-1.016x at #3 #9 #10 #14
# #15, #8 unchanged; varlen auto/old >= 1.00 over the 16), commit the applied patch and `git rm` the patch file; else
# leave the forms by name and say why in perf/NOTES.md.
# 1. Tests: gqa's DA forms (DaAutoWritesTheHeadsFromS256OnSm90 never ran), real workloads, bits, malformed switches;
#    out_proj's (DX=heads removed in the forty-fifth session); varlen's bias + RoPE (vec1), block table (side), lt16,
#    mixed and real-workload tests (the vec1 and side tests have never run on a GPU).
# 2. gqa auto against DA=cublaslt at #3 #8 #9 #10 #14 #15 (three rounds); varlen auto against vec + main over the 16.
# 3. float64 PyTorch at gqa #9 #15, varlen #2 #8 #10; memcheck on the DA auto and block-table tests; on an H200 the
#    suites of gqa and varlen (two each).
source perf/device/common.sh
LIMIT=${LIMIT:-480}
P=$M/attnbwd_perf
shards 'CudaOutProj.*:CudaGqaRope.Da*:CudaGqaRope.RealWorkloads*:CudaGqaRope.RunsAreBitIdentical:CudaGqaRope.Malformed*:CudaVisionVarlenRope.Odd*:CudaVisionVarlenRope.BiasRope*:CudaVisionVarlenRope.BlockTable*:CudaVisionVarlenRope.Lt16*:CudaVisionVarlenRope.MixedQkv*:CudaVisionVarlenRope.RealWorkloads*' 150
abrun gqa_rope_backward 3,8,9,10,14,15 3 gqa-da-auto 90 auto=$P copy=$P,ATTNBWD_CUDA_GQA_DA=cublaslt
abrun vision_varlen_rope_backward all 2 varlen-auto 150 auto=$P old=$P,ATTNBWD_CUDA_VARLEN_BIASROPE=vec,ATTNBWD_CUDA_VARLEN_TABLE=main
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
