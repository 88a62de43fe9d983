#include "tools/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "attnbwd/error.hpp"

namespace attnbwd::tools {

namespace {

// Deep enough for any real header; shallow enough that hostile input cannot exhaust the stack.
constexpr int kMaxDepth = 256;

bool integral_in_range(double d) {
  // 2^63 is exactly representable; every integral double strictly inside (-2^63, 2^63) fits int64.
  return std::isfinite(d) && d == std::trunc(d) && d > -9223372036854775808.0 && d < 9223372036854775808.0;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

class JsonParser {
 public:
  JsonParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  Json parse_document() {
    skip_ws();
    Json v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected content after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(source_, "byte " + std::to_string(pos_) + ": " + msg);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  bool consume_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (pos_ >= s_.size()) fail("unexpected end of input, expected a value");
    const char c = s_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Json(parse_string());
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    if (consume_literal("true")) return Json(true);
    if (consume_literal("false")) return Json(false);
    if (consume_literal("null")) return Json();
    fail(std::string("unexpected character '") + c + "', expected a value");
  }

  Json parse_object(int depth) {
    ++pos_;  // '{'
    Json obj = Json::object();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return obj;
    }
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key in object");
      const std::size_t key_pos = pos_;
      std::string key = parse_string();
      if (obj.find(key)) {
        pos_ = key_pos;
        fail("duplicate key \"" + key + "\"");
      }
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') fail("expected ':' after object key");
      ++pos_;
      skip_ws();
      obj.obj_.emplace_back(std::move(key), parse_value(depth + 1));
      skip_ws();
      if (pos_ >= s_.size()) fail("unexpected end of input in object");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return obj;
      }
      fail("expected ',' or '}' in object");
    }
  }

  Json parse_array(int depth) {
    ++pos_;  // '['
    Json arr = Json::array();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return arr;
    }
    for (;;) {
      skip_ws();
      arr.arr_.push_back(parse_value(depth + 1));
      skip_ws();
      if (pos_ >= s_.size()) fail("unexpected end of input in array");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return arr;
      }
      fail("expected ',' or ']' in array");
    }
  }

  std::uint32_t parse_hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else
        fail("invalid hex digit in \\u escape");
    }
    pos_ += 4;
    return v;
  }

  // Validates one raw UTF-8 sequence starting at pos_ (a lead byte >= 0x80) and copies it.
  void copy_utf8_sequence(std::string& out) {
    const auto b0 = static_cast<unsigned char>(s_[pos_]);
    int len = 0;
    std::uint32_t cp = 0, min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF)
      len = 2, cp = b0 & 0x1F, min = 0x80;
    else if (b0 >= 0xE0 && b0 <= 0xEF)
      len = 3, cp = b0 & 0x0F, min = 0x800;
    else if (b0 >= 0xF0 && b0 <= 0xF4)
      len = 4, cp = b0 & 0x07, min = 0x10000;
    else
      fail("invalid UTF-8 in string");
    if (pos_ + len > s_.size()) fail("truncated UTF-8 sequence in string");
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(s_[pos_ + i]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in string");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8 in string");
    out.append(s_.substr(pos_, len));
    pos_ += len;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        copy_utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!consume_literal("\\u")) fail("high surrogate not followed by a low surrogate");
            const std::uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  Json parse_number() {
    const std::size_t start = pos_;
    auto digit = [&](std::size_t i) { return i < s_.size() && s_[i] >= '0' && s_[i] <= '9'; };
    if (s_[pos_] == '-') ++pos_;
    if (!digit(pos_)) fail("expected a digit");
    if (s_[pos_] == '0') {
      ++pos_;
      if (digit(pos_)) fail("leading zeros are not allowed");
    } else {
      while (digit(pos_)) ++pos_;
    }
    bool integer_syntax = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integer_syntax = false;
      ++pos_;
      if (!digit(pos_)) fail("expected a digit after '.'");
      while (digit(pos_)) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integer_syntax = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit(pos_)) fail("expected a digit in exponent");
      while (digit(pos_)) ++pos_;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (integer_syntax) {
      std::int64_t i = 0;
      const auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc() && r.ptr == last) return Json(i);
      // Too large for int64: fall through and keep it as a double only.
    }
    double d = 0.0;
    const auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) {  // beyond double (1e999, 1e-999)
      pos_ = start;
      fail("number out of range");
    }
    if (r.ptr != last) {
      pos_ = start;
      fail("malformed number");
    }
    Json v(d);
    if (integer_syntax) v.integral_ = false;  // beyond int64: no exact integer value
    return v;
  }

  std::string_view s_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

Json::Json(double d) : type_(Type::Number), num_(d) {
  if (integral_in_range(d)) {
    int_ = static_cast<std::int64_t>(d);
    integral_ = true;
  }
}

Json Json::parse(std::string_view text, const std::string& source) {
  return JsonParser(text, source).parse_document();
}

const char* Json::type_name(Type t) {
  switch (t) {
    case Type::Null: return "null";
    case Type::Bool: return "boolean";
    case Type::Number: return "number";
    case Type::String: return "string";
    case Type::Array: return "array";
    case Type::Object: return "object";
  }
  return "?";
}

namespace {
[[noreturn]] void type_error(const std::string& what, const char* want, Json::Type got) {
  throw Error(what, std::string("expected a JSON ") + want + ", got " + Json::type_name(got));
}
}  // namespace

bool Json::as_bool(const std::string& what) const {
  if (!is_bool()) type_error(what, "boolean", type_);
  return bool_;
}
double Json::as_double(const std::string& what) const {
  if (!is_number()) type_error(what, "number", type_);
  return num_;
}
std::int64_t Json::as_int(const std::string& what) const {
  if (!is_number()) type_error(what, "integer", type_);
  if (!integral_) throw Error(what, "expected an integer, got " + dump());
  return int_;
}
const std::string& Json::as_string(const std::string& what) const {
  if (!is_string()) type_error(what, "string", type_);
  return str_;
}
const Json::Array& Json::as_array(const std::string& what) const {
  if (!is_array()) type_error(what, "array", type_);
  return arr_;
}
const Json::Object& Json::as_object(const std::string& what) const {
  if (!is_object()) type_error(what, "object", type_);
  return obj_;
}

const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& kv : obj_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

const Json& Json::at(std::string_view key, const std::string& what) const {
  as_object(what);
  if (const Json* v = find(key)) return *v;
  throw Error(what, "missing key \"" + std::string(key) + "\"");
}

Json& Json::set(const std::string& key, Json value) {
  if (is_null()) type_ = Type::Object;
  if (!is_object()) type_error("json", "object", type_);
  for (auto& kv : obj_)
    if (kv.first == key) return kv.second = std::move(value);
  obj_.emplace_back(key, std::move(value));
  return obj_.back().second;
}

Json& Json::push_back(Json value) {
  if (is_null()) type_ = Type::Array;
  if (!is_array()) type_error("json", "array", type_);
  arr_.push_back(std::move(value));
  return arr_.back();
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

namespace {
void dump_to(std::string& out, const Json& v) {
  switch (v.type()) {
    case Json::Type::Null: out += "null"; break;
    case Json::Type::Bool: out += v.as_bool() ? "true" : "false"; break;
    case Json::Type::Number: {
      char buf[32];
      std::to_chars_result r;
      // Integers print exactly; other doubles in the shortest form that round-trips.
      if (v.is_integer()) {
        r = std::to_chars(buf, buf + sizeof buf, v.as_int());
      } else {
        if (!std::isfinite(v.as_double())) throw Error("json", "cannot serialize a non-finite number");
        r = std::to_chars(buf, buf + sizeof buf, v.as_double());
      }
      out.append(buf, r.ptr);
      break;
    }
    case Json::Type::String: append_json_string(out, v.as_string()); break;
    case Json::Type::Array: {
      out += '[';
      bool first = true;
      for (const Json& e : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_to(out, e);
      }
      out += ']';
      break;
    }
    case Json::Type::Object: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.as_object()) {
        if (!first) out += ',';
        first = false;
        append_json_string(out, kv.first);
        out += ':';
        dump_to(out, kv.second);
      }
      out += '}';
      break;
    }
  }
}
}  // namespace

std::string Json::dump() const {
  std::string out;
  dump_to(out, *this);
  return out;
}

}  // namespace attnbwd::tools
