#include "tools/workloads.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "attnbwd/error.hpp"
#include "tools/json.hpp"

#ifndef ATTNBWD_DEFAULT_SOLEXEC_DIR
#define ATTNBWD_DEFAULT_SOLEXEC_DIR ""
#endif

namespace attnbwd::tools {

namespace {

struct OpInfo {
  const char* op;
  const char* dir;
  const char* builtin_definition;  // definition.json without descriptions, for machines without it
};

// Copies of shared/solexec/*/definition.json (descriptions dropped); a test checks they still match.
const OpInfo kOps[] = {
    {"out_proj_backward", "004_attention_output_projection_with_reshape_backward",
     R"json({"name":"004_attention_output_projection_with_reshape_backward",
 "custom_inputs_entrypoint":null,
 "axes":{
  "batch_size":{"type":"var"},
  "seq_len":{"type":"var"},
  "num_heads":{"type":"const","value":32},
  "head_dim":{"type":"const","value":64},
  "hidden_size":{"type":"const","value":2048}},
 "inputs":{
  "grad_output":{"shape":["batch_size","seq_len","hidden_size"],"dtype":"bfloat16"},
  "reshaped":{"shape":["batch_size","seq_len","hidden_size"],"dtype":"bfloat16"},
  "weight":{"shape":["hidden_size","hidden_size"],"dtype":"bfloat16"}},
 "outputs":{
  "grad_attn_output":{"shape":["batch_size","num_heads","seq_len","head_dim"],"dtype":"bfloat16"},
  "grad_weight":{"shape":["hidden_size","hidden_size"],"dtype":"bfloat16"}}})json"},
    {"gqa_rope_backward", "003_grouped_query_attention_with_rope_backward",
     R"json({"name":"003_grouped_query_attention_with_rope_backward",
 "custom_inputs_entrypoint":null,
 "axes":{
  "batch_size":{"type":"var"},
  "seq_len":{"type":"var"},
  "hidden_size":{"type":"const","value":5120},
  "num_attention_heads":{"type":"const","value":32},
  "num_key_value_heads":{"type":"const","value":8},
  "head_dim":{"type":"const","value":128},
  "q_proj_size":{"type":"expr","expression":"num_attention_heads * head_dim"},
  "kv_proj_size":{"type":"expr","expression":"num_key_value_heads * head_dim"}},
 "inputs":{
  "grad_output":{"shape":["batch_size","seq_len","hidden_size"],"dtype":"bfloat16"},
  "hidden_states":{"shape":["batch_size","seq_len","hidden_size"],"dtype":"bfloat16"},
  "cos":{"shape":["batch_size","seq_len","head_dim"],"dtype":"bfloat16"},
  "sin":{"shape":["batch_size","seq_len","head_dim"],"dtype":"bfloat16"},
  "q_weight":{"shape":["q_proj_size","hidden_size"],"dtype":"bfloat16"},
  "k_weight":{"shape":["kv_proj_size","hidden_size"],"dtype":"bfloat16"},
  "v_weight":{"shape":["kv_proj_size","hidden_size"],"dtype":"bfloat16"},
  "o_weight":{"shape":["hidden_size","q_proj_size"],"dtype":"bfloat16"},
  "query_states":{"shape":["batch_size","num_attention_heads","seq_len","head_dim"],"dtype":"bfloat16"},
  "key_states":{"shape":["batch_size","num_attention_heads","seq_len","head_dim"],"dtype":"bfloat16"},
  "value_states":{"shape":["batch_size","num_attention_heads","seq_len","head_dim"],"dtype":"bfloat16"},
  "attn_weights":{"shape":["batch_size","num_attention_heads","seq_len","seq_len"],"dtype":"bfloat16"},
  "attn_output":{"shape":["batch_size","seq_len","q_proj_size"],"dtype":"bfloat16"},
  "scaling":{"shape":null,"dtype":"float32"}},
 "outputs":{
  "grad_hidden_states":{"shape":["batch_size","seq_len","hidden_size"],"dtype":"bfloat16"},
  "grad_q_weight":{"shape":["q_proj_size","hidden_size"],"dtype":"bfloat16"},
  "grad_k_weight":{"shape":["kv_proj_size","hidden_size"],"dtype":"bfloat16"},
  "grad_v_weight":{"shape":["kv_proj_size","hidden_size"],"dtype":"bfloat16"},
  "grad_o_weight":{"shape":["hidden_size","q_proj_size"],"dtype":"bfloat16"}}})json"},
    {"vision_mha_norm_backward", "001_fused_vision_multihead_attention_with_norms_backward",
     R"json({"name":"001_fused_vision_multihead_attention_with_norms_backward",
 "custom_inputs_entrypoint":null,
 "axes":{
  "batch_size":{"type":"var"},
  "seq_len":{"type":"const","value":577},
  "embed_dim":{"type":"const","value":1024},
  "num_heads":{"type":"const","value":16},
  "head_dim":{"type":"const","value":64},
  "qkv_dim":{"type":"expr","expression":"embed_dim * 3"}},
 "inputs":{
  "grad_output":{"shape":["batch_size","seq_len","embed_dim"],"dtype":"float32"},
  "x":{"shape":["batch_size","seq_len","embed_dim"],"dtype":"float32"},
  "x_mean":{"shape":["batch_size","seq_len","1"],"dtype":"float32"},
  "x_var":{"shape":["batch_size","seq_len","1"],"dtype":"float32"},
  "x_norm":{"shape":["batch_size","seq_len","embed_dim"],"dtype":"float32"},
  "ln_weight":{"shape":["embed_dim"],"dtype":"float32"},
  "qkv_weight":{"shape":["qkv_dim","embed_dim"],"dtype":"float32"},
  "q":{"shape":["batch_size","num_heads","seq_len","head_dim"],"dtype":"float32"},
  "k":{"shape":["batch_size","num_heads","seq_len","head_dim"],"dtype":"float32"},
  "v":{"shape":["batch_size","num_heads","seq_len","head_dim"],"dtype":"float32"},
  "attn_weights":{"shape":["batch_size","num_heads","seq_len","seq_len"],"dtype":"float32"},
  "attn_output":{"shape":["batch_size","seq_len","embed_dim"],"dtype":"float32"},
  "out_weight":{"shape":["embed_dim","embed_dim"],"dtype":"float32"},
  "scale":{"shape":null,"dtype":"float32"},
  "norm_eps":{"shape":null,"dtype":"float32"}},
 "outputs":{
  "grad_x":{"shape":["batch_size","seq_len","embed_dim"],"dtype":"float32"},
  "grad_qkv_weight":{"shape":["qkv_dim","embed_dim"],"dtype":"float32"},
  "grad_qkv_bias":{"shape":["qkv_dim"],"dtype":"float32"},
  "grad_out_weight":{"shape":["embed_dim","embed_dim"],"dtype":"float32"},
  "grad_out_bias":{"shape":["embed_dim"],"dtype":"float32"},
  "grad_ln_weight":{"shape":["embed_dim"],"dtype":"float32"},
  "grad_ln_bias":{"shape":["embed_dim"],"dtype":"float32"}}})json"},
    {"vision_varlen_rope_backward", "017_fused_vision_cu_seqlens_attention_with_2d_rope_backward",
     R"json({"name":"017_fused_vision_cu_seqlens_attention_with_2d_rope_backward",
 "custom_inputs_entrypoint":"get_inputs",
 "axes":{
  "total_seq_len":{"type":"var"},
  "num_sequences":{"type":"var"},
  "hidden_size":{"type":"const","value":3584},
  "num_heads":{"type":"const","value":28},
  "head_dim":{"type":"const","value":128},
  "qkv_out_size":{"type":"expr","expression":"hidden_size * 3"},
  "num_seqlens":{"type":"expr","expression":"num_sequences + 1"}},
 "inputs":{
  "grad_output":{"shape":["total_seq_len","hidden_size"],"dtype":"float32"},
  "hidden_states":{"shape":["total_seq_len","hidden_size"],"dtype":"float32"},
  "qkv_weight":{"shape":["qkv_out_size","hidden_size"],"dtype":"float32"},
  "qkv_bias":{"shape":["qkv_out_size"],"dtype":"float32"},
  "proj_weight":{"shape":["hidden_size","hidden_size"],"dtype":"float32"},
  "proj_bias":{"shape":["hidden_size"],"dtype":"float32"},
  "cos":{"shape":["total_seq_len","head_dim"],"dtype":"float32"},
  "sin":{"shape":["total_seq_len","head_dim"],"dtype":"float32"},
  "cu_seqlens":{"shape":["num_seqlens"],"dtype":"int32"},
  "attention_dropout":{"shape":null,"dtype":"float32"},
  "scaling":{"shape":null,"dtype":"float32"}},
 "outputs":{
  "grad_hidden_states":{"shape":["total_seq_len","hidden_size"],"dtype":"float32"},
  "grad_qkv_weight":{"shape":["qkv_out_size","hidden_size"],"dtype":"float32"},
  "grad_qkv_bias":{"shape":["qkv_out_size"],"dtype":"float32"},
  "grad_proj_weight":{"shape":["hidden_size","hidden_size"],"dtype":"float32"},
  "grad_proj_bias":{"shape":["hidden_size"],"dtype":"float32"}}})json"},
};

const OpInfo& op_info(const std::string& op) {
  for (const OpInfo& info : kOps)
    if (op == info.op) return info;
  std::string valid;
  for (const OpInfo& info : kOps) valid += std::string(valid.empty() ? "" : ", ") + info.op;
  throw Error("op", "unknown op \"" + op + "\" (valid: " + valid + ")");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool file_exists(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

// Recursive descent over: expr = term {(+|-) term}; term = factor {(*|/) factor};
// factor = integer | axis name | ( expr ).
class ExprEval {
 public:
  ExprEval(const std::string& s, const Axes& axes) : s_(s), axes_(axes) {}

  std::int64_t run() {
    const std::int64_t v = expr();
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected character");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(s_, "axis expression, position " + std::to_string(pos_) + ": " + msg);
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  std::int64_t expr() {
    std::int64_t v = term();
    for (;;) {
      if (accept('+'))
        v += term();
      else if (accept('-'))
        v -= term();
      else
        return v;
    }
  }
  std::int64_t term() {
    std::int64_t v = factor();
    for (;;) {
      if (accept('*')) {
        v *= factor();
      } else if (accept('/')) {
        const std::int64_t d = factor();
        if (d == 0) fail("division by zero");
        v /= d;
      } else {
        return v;
      }
    }
  }
  std::int64_t factor() {
    skip_ws();
    if (accept('(')) {
      const std::int64_t v = expr();
      if (!accept(')')) fail("expected ')'");
      return v;
    }
    const std::size_t start = pos_;
    if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      return std::stoll(s_.substr(start, pos_ - start));
    }
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    if (pos_ == start) fail("expected a number, an axis name or '('");
    const std::string name = s_.substr(start, pos_ - start);
    const auto it = axes_.find(name);
    if (it == axes_.end()) throw Error(name, "unknown axis in expression \"" + s_ + "\"");
    return it->second;
  }

  const std::string& s_;
  const Axes& axes_;
  std::size_t pos_ = 0;
};

std::vector<TensorDef> parse_tensor_defs(const Json& section, const std::string& source) {
  std::vector<TensorDef> defs;
  for (const auto& [name, spec] : section.as_object(source)) {
    TensorDef t;
    t.name = name;
    t.dtype = spec.at("dtype", source + ": " + name).as_string(source + ": " + name + ".dtype");
    const Json& shape = spec.at("shape", source + ": " + name);
    if (shape.is_null()) {
      t.is_scalar = true;
    } else {
      for (const Json& e : shape.as_array(source + ": " + name + ".shape"))
        t.shape.push_back(e.is_integer() ? std::to_string(e.as_int())
                                         : e.as_string(source + ": " + name + ".shape"));
    }
    defs.push_back(std::move(t));
  }
  return defs;
}

}  // namespace

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const OpInfo& info : kOps) v.push_back(info.op);
    return v;
  }();
  return names;
}

const std::string& problem_dir(const std::string& op) {
  static const std::map<std::string, std::string> dirs = [] {
    std::map<std::string, std::string> m;
    for (const OpInfo& info : kOps) m[info.op] = info.dir;
    return m;
  }();
  op_info(op);  // throws for an unknown op
  return dirs.at(op);
}

std::string solexec_dir() {
  if (const char* env = std::getenv("ATTNBWD_SOLEXEC"); env && *env) return env;
  return ATTNBWD_DEFAULT_SOLEXEC_DIR;
}

std::int64_t eval_axis_expr(const std::string& expr, const Axes& axes) { return ExprEval(expr, axes).run(); }

Axes Definition::resolve_axes(const Axes& given) const {
  auto is_var = [&](const std::string& a) {
    for (const auto& v : var_axes)
      if (v == a) return true;
    return false;
  };
  Axes axes = const_axes;
  for (const auto& [name, value] : given) {
    bool is_expr = false;
    for (const auto& e : expr_axes) is_expr = is_expr || e.first == name;
    if (is_expr) throw Error(name, "is derived from other axes and cannot be given");
    if (!is_var(name) && !const_axes.count(name)) {
      std::string known;
      for (const auto& v : var_axes) known += (known.empty() ? "" : ", ") + v;
      for (const auto& c : const_axes) known += (known.empty() ? "" : ", ") + c.first;
      throw Error(name, "unknown axis for " + this->name + " (axes: " + known + ")");
    }
    if (value < 1) throw Error(name, "axis must be at least 1, got " + std::to_string(value));
    axes[name] = value;  // a constant may be overridden, e.g. for small test shapes
  }
  for (const auto& v : var_axes)
    if (!given.count(v)) throw Error(v, "missing variable axis");
  // Expressions may refer to each other: evaluate until all are resolved.
  std::vector<std::pair<std::string, std::string>> pending = expr_axes;
  while (!pending.empty()) {
    std::vector<std::pair<std::string, std::string>> next;
    for (const auto& e : pending) {
      try {
        axes[e.first] = eval_axis_expr(e.second, axes);
      } catch (const Error&) {
        next.push_back(e);
      }
    }
    if (next.size() == pending.size()) axes[next.front().first] = eval_axis_expr(next.front().second, axes);
    pending = std::move(next);
  }
  return axes;
}

std::vector<std::int64_t> Definition::shape_of(const TensorDef& t, const Axes& axes) const {
  std::vector<std::int64_t> shape;
  for (const auto& dim : t.shape) shape.push_back(eval_axis_expr(dim, axes));
  return shape;
}

Definition parse_definition(const std::string& json_text, const std::string& source) {
  const Json j = Json::parse(json_text, source);
  Definition d;
  d.name = j.at("name", source).as_string(source + ": name");
  const Json* custom = j.find("custom_inputs_entrypoint");
  d.custom_inputs = custom && !custom->is_null();
  for (const auto& [name, axis] : j.at("axes", source).as_object(source + ": axes")) {
    const std::string what = source + ": axes." + name;
    const std::string& type = axis.at("type", what).as_string(what + ".type");
    if (type == "var")
      d.var_axes.push_back(name);
    else if (type == "const")
      d.const_axes[name] = axis.at("value", what).as_int(what + ".value");
    else if (type == "expr")
      d.expr_axes.emplace_back(name, axis.at("expression", what).as_string(what));
    else
      throw Error(what, "unknown axis type \"" + type + "\"");
  }
  d.inputs = parse_tensor_defs(j.at("inputs", source), source + ": inputs");
  d.outputs = parse_tensor_defs(j.at("outputs", source), source + ": outputs");
  return d;
}

Definition builtin_definition(const std::string& op) {
  return parse_definition(op_info(op).builtin_definition, "built-in definition of " + op);
}

Definition load_definition(const std::string& op) {
  const std::string dir = solexec_dir();
  const std::string path = dir + "/" + problem_dir(op) + "/definition.json";
  if (dir.empty() || !file_exists(path)) return builtin_definition(op);
  return parse_definition(read_text_file(path), path);
}

std::vector<Workload> parse_workloads(const std::string& text, const std::string& source) {
  std::vector<Workload> out;
  std::istringstream lines(text);
  std::string line;
  for (int lineno = 1; std::getline(lines, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = source + ": line " + std::to_string(lineno);
    const Json j = Json::parse(line, where);
    Workload w;
    w.index = static_cast<int>(out.size());
    w.uuid = j.at("uuid", where).as_string(where + ": uuid");
    for (const auto& [name, value] : j.at("axes", where).as_object(where + ": axes"))
      w.axes[name] = value.as_int(where + ": axes." + name);
    if (const Json* inputs = j.find("inputs")) {
      for (const auto& [name, spec] : inputs->as_object(where + ": inputs")) {
        const Json* type = spec.find("type");
        if (type && type->is_string() && type->as_string() == "scalar")
          w.scalars[name] =
              spec.at("value", where + ": inputs." + name).as_double(where + ": inputs." + name);
      }
    }
    const Json& tol = j.at("tolerance", where);
    w.atol = tol.at("max_atol", where + ": tolerance").as_double(where + ": tolerance.max_atol");
    w.rtol = tol.at("max_rtol", where + ": tolerance").as_double(where + ": tolerance.max_rtol");
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<Workload> load_workloads(const std::string& op) {
  const std::string dir = solexec_dir();
  if (dir.empty())
    throw Error("workloads",
                "no solexec folder: set ATTNBWD_SOLEXEC to the folder holding the problem folders");
  const std::string path = dir + "/" + problem_dir(op) + "/workload.jsonl";
  return parse_workloads(read_text_file(path), path);
}

const Workload& find_workload(const std::vector<Workload>& workloads, const std::string& key) {
  for (const Workload& w : workloads)
    if (w.uuid == key || std::to_string(w.index) == key) return w;
  throw Error("workload", "no workload with index or uuid \"" + key + "\" (indices 0.." +
                              std::to_string(static_cast<int>(workloads.size()) - 1) + ")");
}

Axes axes_from_string(const std::string& text) {
  Axes axes;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto eq = item.find('=');
    const std::string name = eq == std::string::npos ? item : item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::size_t used = 0;
    std::int64_t v = 0;
    bool ok = !name.empty() && !value.empty();
    try {
      if (ok) v = std::stoll(value, &used);
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || used != value.size())
      throw Error("axes", "expected name=integer, got \"" + item + "\" in \"" + text + "\"");
    if (axes.count(name)) throw Error("axes", "axis \"" + name + "\" given twice");
    axes[name] = v;
  }
  if (axes.empty()) throw Error("axes", "no axes given");
  return axes;
}

std::string axes_to_string(const Axes& axes) {
  std::string s;
  for (const auto& [name, value] : axes) s += (s.empty() ? "" : ",") + name + "=" + std::to_string(value);
  return s;
}

}  // namespace attnbwd::tools
