// A small strict JSON value (RFC 8259) for the tools: safetensors headers, workload.jsonl lines and
// definition.json files. Objects keep insertion order (safetensors tensors, definition inputs are
// ordered); numbers keep both a double and, when integral, an exact int64 (offsets above 2^53).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnbwd::tools {

class Json {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::Bool), bool_(b) {}
  Json(double d);
  Json(std::int64_t i) : type_(Type::Number), num_(static_cast<double>(i)), int_(i), integral_(true) {}
  Json(int i) : Json(static_cast<std::int64_t>(i)) {}
  Json(std::string s) : type_(Type::String), str_(std::move(s)) {}
  Json(const char* s) : Json(std::string(s)) {}
  Json(Array a) : type_(Type::Array), arr_(std::move(a)) {}
  Json(Object o) : type_(Type::Object), obj_(std::move(o)) {}

  static Json array() { return Json(Array{}); }
  static Json object() { return Json(Object{}); }

  // Parses one complete JSON text (surrounding whitespace allowed, nothing else). Strict: no
  // comments, trailing commas, NaN, leading zeros, raw control characters, invalid UTF-8, lone
  // surrogates or duplicate keys. Errors are attnbwd::Error(source, "byte N: ...").
  static Json parse(std::string_view text, const std::string& source = "json");

  // Compact serialization (no spaces). Non-finite numbers throw: JSON cannot hold them.
  std::string dump() const;

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_number() const { return type_ == Type::Number; }
  bool is_integer() const { return type_ == Type::Number && integral_; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed access; each throws attnbwd::Error(`what`, ...) on a type mismatch.
  bool as_bool(const std::string& what = "json") const;
  double as_double(const std::string& what = "json") const;
  std::int64_t as_int(const std::string& what = "json") const;  // integral numbers only
  const std::string& as_string(const std::string& what = "json") const;
  const Array& as_array(const std::string& what = "json") const;
  const Object& as_object(const std::string& what = "json") const;

  // Object members: find returns null when absent (or when this is not an object).
  const Json* find(std::string_view key) const;
  const Json& at(std::string_view key, const std::string& what = "json") const;
  // Replaces an existing member or appends a new one (this must be an object or null).
  Json& set(const std::string& key, Json value);
  // Appends to an array (this must be an array or null).
  Json& push_back(Json value);

  static const char* type_name(Type t);

 private:
  friend class JsonParser;
  Type type_ = Type::Null;
  bool bool_ = false;
  double num_ = 0.0;
  std::int64_t int_ = 0;
  bool integral_ = false;
  std::string str_;
  Array arr_;
  Object obj_;
};

// Appends `s` as a quoted JSON string literal (escapes ", \, control characters).
void append_json_string(std::string& out, std::string_view s);

}  // namespace attnbwd::tools
