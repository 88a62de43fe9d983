# Fifty-first session, call 4 (what the device time left allows after twelve refused starts): the tests that capture
# and replay graphs or use the context's streams, on main without split and sidedirect (4449ca2's context).
# Binaries: .carry (bin-new.commit).
source perf/device/common.sh
LIMIT=${LIMIT:-90}
shards 'CudaGraphs.*:CudaConcurrency.*:CudaStreams.*:CudaDeterminism.*' 80
grep -h -B2 -A12 "Failure" "$R"/tests-*.txt | head -40
fin
