// The two gradient GEMMs of a bias-free linear layer Y = X·Wᵀ (W [out, in]) on sm_90a, in one
// persistent, warp-specialised TMA + wgmma kernel (linear_backward_sm90.cu):
//   dX = dY·W   [T, in], stored in a head-split layout [B, H, S, D] (H·D = in, T = B·S; H = 1,
//               D = in is plain row-major),
//   dW = dYᵀ·X  [out, in], summed over the T tokens.
// Used by out_proj_backward (out = in = H·D) and gqa_rope_backward (the o, q, k, v projections).
// Grouped (segments > 1): W and dW are up to three row blocks of [out, in] in separate allocations (gqa's
// q, k, v projections, whose gradients dY_s are column blocks of one [T, out] buffer): the launch computes
// dX = Σ_s dY_s·W_s (one fp32 sum over all out columns, one rounding) and every dW_s = dY_sᵀ·X.
// Host-side interface, free of Kokkos and of the Context, so a stand-alone probe can drive it too.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain struct; no driver library needed to use it)
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnbwd::cuda::sm90 {

struct LinearBackward {
  const void* grad_output = nullptr;  // dY [T, out] bf16, row stride ld_grad_output
  const void* input = nullptr;        // X  [T, in]  bf16, row stride ld_input
  const void* weight = nullptr;       // W  [out, in] bf16, contiguous
  void* grad_input = nullptr;         // dX [B, H, S, D] bf16, contiguous
  void* grad_weight = nullptr;        // dW [out, in] bf16, contiguous
  std::int64_t out_features = 0, in_features = 0;
  std::int64_t ld_grad_output = 0, ld_input = 0;  // 0: out_features, in_features
  std::int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0;  // layout of dX
  // segments > 1: weight and grad_weight are unused; segment s is seg_weight[s] / seg_grad_weight[s]
  // [seg_rows[s], in] (contiguous, 16-byte aligned), Σ seg_rows = out_features, every segment but the last
  // a multiple of 64 rows.
  static constexpr int kMaxSegments = 3;
  int segments = 1;
  const void* seg_weight[kMaxSegments] = {};
  void* seg_grad_weight[kMaxSegments] = {};
  std::int64_t seg_rows[kMaxSegments] = {};

  std::int64_t tokens() const { return batch * seq_len; }
  std::int64_t ld_dy() const { return ld_grad_output ? ld_grad_output : out_features; }
  std::int64_t ld_x() const { return ld_input ? ld_input : in_features; }
};

// How the two GEMMs are cut into work units (tiles of 128x256, K split into `splits` ranges).
struct LinearBackwardPlan {
  int splits_dx = 1, splits_dw = 1;
  int grid = 0;                       // persistent CTAs (at most one per SM)
  int ctas_dx = 0;                    // of which the first ctas_dx work on dX, the others on dW
  int cluster = 1;                    // > 1: launched in clusters of this size = splits_dx, which reduce
                                      // each split dX tile together
  bool coop = false;                  // a cooperative launch (every CTA resident at once, clusters of 1) whose
                                      // split dX tiles are reduced by their CTAs together (SplitReduce::CoResident)
  bool dx_only = false;               // the launch computes dX alone (dW elsewhere, e.g. cuBLASLt)
  int dx_tile_n = 256;                // dX tiles of 128 x dx_tile_n: 256, or 128 (ungrouped, cluster or cooperative
                                      // reduction, at most 2 splits)
  double model_time = 0;             // the planner's finish time (k-block times of one SM) of the plan
  std::size_t workspace_bytes = 0;    // split-K partial sums (fp32)
  std::size_t counters = 0;           // per-tile arrival counters (unsigned)
};

// Why this kernel cannot take the problem (empty: it can): alignment and strides the TMA
// descriptors can express, an even head_dim (results are stored as bf16 pairs), sizes.
std::string linear_backward_unsupported(const LinearBackward& p);

// How split-K partials of dX are summed: by the CTAs of a cluster together (each CTA stores a quarter
// or half of the tile), by the last CTA of the tile to arrive (all partials through one SM; the
// split-K of dW always works this way), or by the tile's CTAs together as in Cluster, in a cooperative launch
// instead of clusters (CoResident: the launch guarantees that every CTA is resident at once, which is all the
// reduction needs; without clusters the grid is not limited to the whole clusters that fit the GPCs: 132 CTAs
// on an H200 against 120 in clusters of 4).
enum class SplitReduce { Cluster, LastArrival, CoResident };

// Whether the current device takes cooperative launches (SplitReduce::CoResident plans).
bool cooperative_launch_supported();

// The work split for this problem on a GPU with `sms` multiprocessors (the current device).
// dx_tile_n: dX's tile columns, 256 or 128 (128: ungrouped launches with SplitReduce::Cluster or CoResident only).
LinearBackwardPlan linear_backward_plan(const LinearBackward& p, int sms,
                                        SplitReduce dx_reduce = SplitReduce::Cluster, int dx_tile_n = 256);

// The plan out_proj's auto takes: the cluster reduction's, or the cooperative launch's (SplitReduce::CoResident) where
// the device takes cooperative launches and the planner's model puts it ≥ 10 % ahead (at out_proj's sizes: T = 256,
// whose 4 dX splits in clusters of 4 leave 120 CTAs on an H200; at T = 512 the two tie and the cluster plan stays,
// where the cooperative launch measured 2 % slower: perf/NOTES.md, twenty-ninth session).
// dx_tile_n: 0 (auto) also weighs 128-column dX tiles (clusters) for ungrouped plans whose dX is split, and takes them
// where the model puts them ahead (at out_proj's sizes: T = 256, 2 splits in clusters of 2, and T = 512, no split;
// perf/NOTES.md, thirtieth session); 256 or 128 fixes the tile (128: clusters; ungrouped problems only).
LinearBackwardPlan linear_backward_auto_plan(const LinearBackward& p, int sms, int dx_tile_n = 0);

// A plan for dX alone on at most `ctas` CTAs (dW computed by someone else, concurrently): split-K over
// dX summed by clusters, the splits (at most max_splits: 1, 2 or 4) chosen by the same cost model.
LinearBackwardPlan linear_backward_plan_dx_only(const LinearBackward& p, int sms, int ctas, int max_splits = 4);

// How full the rounds of one CTA per SM (`sms` of them) are with this problem's unsplit dX tiles: tiles / (rounds ·
// sms), 1 when the last round is full (gqa's rule for its grouped dX-only launch).
double linear_backward_dx_fill(const LinearBackward& p, int sms);

// Enqueues the kernel on `stream`. `workspace` holds plan.workspace_bytes; `counters` holds
// plan.counters zeros (the kernel leaves them zero again for the next call). after_own_kernel: a programmatic dependent
// launch (cudaLaunchAttributeProgrammaticStreamSerialization) of the kernel queued just before it on `stream`, which
// must be the library's own (its CTAs may become resident and set up while that kernel ends; the producer waits for its
// completion before the first load, so grad_output may be its output; nothing the kernel writes may be read by it).
void linear_backward_launch(const LinearBackward& p, const LinearBackwardPlan& plan, void* workspace,
                            unsigned* counters, cudaStream_t stream, bool after_own_kernel = false);

// TMA descriptor of a 2-D bf16 row-major matrix [rows, cols] (row stride ld elements), 128-byte swizzled boxes of
// box_cols × box_rows; an Error where the driver refuses it. Shared by the sm_90a kernels
// (linear_backward_sm90.cu, gqa_rope_backward_attn_sm90.cu).
CUtensorMap tensor_map(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld, int box_cols,
                       int box_rows);

// TMA descriptor of a 2-D fp32 matrix [d1][d0] (row stride ld1 elements, a multiple of 4), unswizzled boxes of
// box0 (a multiple of 4, ≤ 256) × box1; elements outside it read as zeros (mha's view of P as rows of 4·S floats).
// A box must start at a 16-byte boundary (a multiple of 4 in d0).
CUtensorMap tensor_map_2d_f32(const void* base, std::int64_t d0, std::int64_t d1, std::int64_t ld1, int box0, int box1);

// TMA descriptor of a 3-D fp16 tensor [d2][d1][d0] (d0 contiguous; strides ld1, ld2 in elements, multiples of 8),
// 128-byte-swizzled boxes of 64 × box1 × 1; elements outside the tensor read as zeros. An Error where the driver
// refuses it (mha's warp-specialised attention kernels).
CUtensorMap tensor_map_3d_f16(const void* base, std::int64_t d0, std::int64_t d1, std::int64_t d2, std::int64_t ld1,
                              std::int64_t ld2, int box1);

// The dynamic shared-memory opt-in of `kernel` (a __global__ function) to `bytes`, once per device and kernel.
// Shared by the sm_90a kernels with more than 48 KB (linear_backward_sm90.cu, linear_thin_sm90.cu,
// mixed_gemm_sm90.cu).
void allow_smem(const void* kernel, int bytes);

// A launch configuration of `grid` CTAs of `threads` threads with `smem` bytes of dynamic shared memory, in clusters
// of `size` CTAs along x; `attr` holds the cluster attribute the configuration points to.
cudaLaunchConfig_t cluster_launch_config(int size, int grid, int threads, std::size_t smem, cudaStream_t stream,
                                         cudaLaunchAttribute& attr);

}  // namespace attnbwd::cuda::sm90
