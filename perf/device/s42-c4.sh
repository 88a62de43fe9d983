# Forty-second session, call 4: where the thin q/k/v kernel's time goes now (v4, ranges, 120 CTAs), and the grouped
# kernel's at #7: ncu full set (one launch each, after warm-up calls; the perf binary with --clock=events) at #13
# (T = 256, MB = 4), #5 (T = 131, MB = 3) and the grouped launch at #7 (T = 293); details page as text, and the SASS
# source page (stall samples per instruction) of the #13 kernel. Count to check: at #13 the kernel is ~67 us (H200) /
# ~71 us (H100) for 32 GFLOP (~48 % of the bf16 tensor peak) and 126 MB of DRAM traffic (~1.8 TB/s).
source perf/device/common.sh
LIMIT=${LIMIT:-300}
P=$M/attnbwd_perf
for w in 13 5; do
  ok && timeout $(tmo 90) ncu --set full --import-source no --kernel-name regex:linear_thin_kernel --launch-skip 3 \
    --launch-count 1 -o $R/thin-$w $P --clock=events --backend=cuda --ops=gqa_rope_backward --workloads=$w \
    > $R/ncu-thin-$w.log 2>&1
  echo "ncu $w rc=$? t=$SECONDS"
  ncu --import $R/thin-$w.ncu-rep --page details > $R/thin-$w-details.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc Active" $R/thin-$w-details.txt | head -8
done
ok && timeout $(tmo 90) ncu --set full --import-source no --kernel-name regex:linear_backward_grouped --launch-skip 3 \
  --launch-count 1 -o $R/grouped-7 $P --clock=events --backend=cuda --ops=gqa_rope_backward --workloads=7 \
  > $R/ncu-grouped-7.log 2>&1
echo "ncu 7 rc=$? t=$SECONDS"
ncu --import $R/grouped-7.ncu-rep --page details > $R/grouped-7-details.txt 2>&1
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput" $R/grouped-7-details.txt | head -6
ncu --import $R/thin-13.ncu-rep --page source --csv --print-source sass > $R/thin-13-sass.csv 2>&1
echo "sass lines: $(wc -l < $R/thin-13-sass.csv)"
ncu --import $R/thin-13.ncu-rep --page raw --csv > $R/thin-13-raw.csv 2>&1
fin
