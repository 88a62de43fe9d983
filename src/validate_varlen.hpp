// vision_varlen_rope_backward's validation in two parts (validate.cpp), for dispatch.cpp's early path: everything that
// needs no value of cu_seqlens (ranks, extents, contiguity, finite scalars, no aliasing; the shape), then cu_seqlens'
// values (from 0 to total_seq_len, non-decreasing) from the host copy. validate(VisionVarlenArgs) is the two in order.
#pragma once

#include <cstdint>

#include "attnbwd/args.hpp"

namespace attnbwd::detail {

VisionVarlenShape validate_varlen_layout(const VisionVarlenArgs& a);
// `cu`: the num_sequences + 1 values of cu_seqlens on the host.
void validate_cu_seqlens(const VisionVarlenShape& s, const std::int32_t* cu);

}  // namespace attnbwd::detail
