// The host-serial oracle: plain loops, double accumulation, the reference's rounding points emulated.
// Slow by design and simple on purpose: every other backend is tested against it.
//
// Each function expects validated arguments (attnbwd::validate) in host memory and writes every
// element of every output.
#pragma once

#include "attnbwd/args.hpp"

namespace attnbwd::serial {

void out_proj_backward(const OutProjShape& s, const OutProjArgs& a);
void gqa_rope_backward(const GqaRopeShape& s, const GqaRopeArgs& a);
void vision_mha_norm_backward(const VisionMhaShape& s, const VisionMhaArgs& a);
void vision_varlen_rope_backward(const VisionVarlenShape& s, const VisionVarlenArgs& a);

}  // namespace attnbwd::serial
