// attnbwd: fast, portable backward passes for four attention blocks. The umbrella header.
#pragma once

#include "attnbwd/bf16.hpp"
#include "attnbwd/error.hpp"
#include "attnbwd/options.hpp"
#include "attnbwd/version.hpp"
#include "attnbwd/out_proj_backward.hpp"
#include "attnbwd/gqa_rope_backward.hpp"
#include "attnbwd/vision_mha_norm_backward.hpp"
#include "attnbwd/vision_varlen_rope_backward.hpp"
