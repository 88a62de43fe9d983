# Forty-eighth session, call 6 (bundle of c3f8a99's binaries, unchanged library code since):
# 1. racecheck on the varlen block-table test the documented way (ATTNBWD_CUDA_SANITIZE_GEMM=plain: the GEMMs through the
#    plain kernel; excluding nvjet crashes racecheck, call 5), the verdict missing since the forty-fifth session;
# 2. memcheck, synccheck and racecheck (plain GEMMs) on the small path's launch-form test, whose late form ran first in
#    call 5;
# 3. on an H200 only: the four suites twice (issues 5-8's figures; gqa with DKDV auto = batch never measured there).
source perf/device/common.sh
LIMIT=${LIMIT:-520}
P=$M/attnbwd_perf
sanitize racecheck 'CudaVisionVarlenRope.BlockTable*' table-race-plain 220 ATTNBWD_CUDA_SANITIZE_GEMM=plain
sanitize memcheck 'CudaGqaRope.SmallAttnSecondLaunch*' small-forms 60
sanitize synccheck 'CudaGqaRope.SmallAttnSecondLaunch*' small-forms 60
sanitize racecheck 'CudaGqaRope.SmallAttnSecondLaunch*' small-forms-plain 120 ATTNBWD_CUDA_SANITIZE_GEMM=plain
case $GPU in *H200*) suites 2 ;; *) echo "not an H200: no suites" ;; esac
fin
