"""Measures the two ceilings of the GPU this runs on (METHOD.md: 'two numbers first'):
device-to-device copy bandwidth (bytes read + written) and dense GEMM rates on random data
(bf16, fp16, tf32, fp32), each the median of timed repetitions after warm-up, with CUDA events.
Prints one JSON object. Needs PyTorch; it is a measuring tool, not part of the library."""
import json
import statistics

import torch


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def main():
    dev = torch.cuda.get_device_properties(0)
    out = {"gpu": dev.name, "sms": dev.multi_processor_count,
           "l2_bytes": getattr(dev, "L2_cache_size", None), "torch": torch.__version__}
    n = 1 << 30  # 4 GiB of fp32 each way
    src = torch.randn(n // 4, device="cuda")
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    out["copy_TBps"] = 2 * src.numel() * 4 / t / 1e12
    del src, dst
    m = 8192
    for name, dt, tf32 in [("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                           ("tf32", torch.float32, True), ("fp32", torch.float32, False)]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(m, m, device="cuda", dtype=dt)
        b = torch.randn(m, m, device="cuda", dtype=dt)
        t = timed(lambda: a @ b, reps=10 if name == "fp32" else 20)
        out[f"gemm_{name}_TFLOPs"] = 2 * m**3 / t / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    print(json.dumps(out))


if __name__ == "__main__":
    main()
