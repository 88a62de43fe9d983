// The benchmark data in shared/solexec: each op's definition.json (axes, inputs, outputs) and its
// workload.jsonl (16 axis settings with tolerances).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnbwd::tools {

using Axes = std::map<std::string, std::int64_t>;

// The library's four op names, in the order `attnbwd list` shows them.
const std::vector<std::string>& op_names();
// The solexec problem folder of an op, e.g. "004_attention_output_projection_with_reshape_backward".
// Throws Error("op", ...) listing the valid names when `op` is unknown.
const std::string& problem_dir(const std::string& op);

// $ATTNBWD_SOLEXEC when set, else the compile-time ATTNBWD_DEFAULT_SOLEXEC_DIR (may be empty).
std::string solexec_dir();

// One input or output of a definition. `shape` holds axis names, integer literals or expressions
// over axes; a scalar has is_scalar set and no shape.
struct TensorDef {
  std::string name;
  std::vector<std::string> shape;
  bool is_scalar = false;
  std::string dtype;  // as in definition.json: "bfloat16", "float32", "int32"
};

struct Definition {
  std::string name;                   // the problem folder name
  std::vector<std::string> var_axes;  // supplied per workload
  std::map<std::string, std::int64_t> const_axes;
  std::vector<std::pair<std::string, std::string>> expr_axes;  // name, expression
  bool custom_inputs = false;              // inputs made by the reference's get_inputs (017)
  std::vector<TensorDef> inputs, outputs;  // definition order

  // All axes: the given ones (variable axes, and optionally overrides of constants) plus the
  // constants and the evaluated expressions. Throws Error(axis, ...) for a missing variable axis, an
  // unknown axis name, a given expression axis or a non-positive value.
  Axes resolve_axes(const Axes& given) const;
  // A tensor's shape under resolved axes.
  std::vector<std::int64_t> shape_of(const TensorDef& t, const Axes& axes) const;
};

// From shared/solexec/<problem>/definition.json when it exists, else the built-in copy (the same
// data, so results do not depend on where the tool runs).
Definition load_definition(const std::string& op);
// The built-in copy only (tests compare it against the file).
Definition builtin_definition(const std::string& op);
Definition parse_definition(const std::string& json_text, const std::string& source);

struct Workload {
  int index = 0;  // line number, from 0
  std::string uuid;
  Axes axes;                              // the variable axes
  std::map<std::string, double> scalars;  // inputs of "type": "scalar"
  double atol = 0.0, rtol = 0.0;          // tolerance.max_atol / max_rtol
};

// Parses shared/solexec/<problem>/workload.jsonl. Throws Error(path, "line N: ...") when absent or
// malformed.
std::vector<Workload> load_workloads(const std::string& op);
std::vector<Workload> parse_workloads(const std::string& jsonl_text, const std::string& source);
// Finds a workload by index ("3") or uuid; throws Error("workload", ...) when none matches.
const Workload& find_workload(const std::vector<Workload>& workloads, const std::string& index_or_uuid);

// "batch_size=1,seq_len=256" <-> axes. Throws Error("axes", ...) on malformed text.
Axes axes_from_string(const std::string& text);
std::string axes_to_string(const Axes& axes);

// Evaluates an integer expression over axes: integers, axis names, + - * / ( ).
std::int64_t eval_axis_expr(const std::string& expr, const Axes& axes);

}  // namespace attnbwd::tools
