#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attnbwd/error.hpp"
#include "tools/json.hpp"

using attnbwd::Error;
using attnbwd::tools::Json;

namespace {

std::string parse_error(const std::string& text) {
  try {
    Json::parse(text, "src");
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "src");
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << text;
  return "";
}

}  // namespace

TEST(Json, Literals) {
  EXPECT_TRUE(Json::parse("null").is_null());
  EXPECT_TRUE(Json::parse(" true ").as_bool());
  EXPECT_FALSE(Json::parse("\tfalse\n").as_bool());
}

TEST(Json, Numbers) {
  EXPECT_EQ(Json::parse("0").as_int(), 0);
  EXPECT_EQ(Json::parse("-17").as_int(), -17);
  // Integers beyond 2^53 stay exact (safetensors offsets of multi-GB files).
  EXPECT_EQ(Json::parse("9007199254740993").as_int(), 9007199254740993LL);
  EXPECT_EQ(Json::parse("-9223372036854775808").as_int(), INT64_MIN);
  EXPECT_DOUBLE_EQ(Json::parse("1.5").as_double(), 1.5);
  EXPECT_FALSE(Json::parse("1.5").is_integer());
  EXPECT_DOUBLE_EQ(Json::parse("-2.5e-3").as_double(), -2.5e-3);
  EXPECT_TRUE(Json::parse("1e3").is_integer());  // integral value, exponent syntax
  EXPECT_EQ(Json::parse("1E3").as_int(), 1000);
  EXPECT_DOUBLE_EQ(Json::parse("0.08838834764831845").as_double(), 0.08838834764831845);
  const Json huge = Json::parse("123456789012345678901234567890");
  EXPECT_TRUE(huge.is_number());
  EXPECT_FALSE(huge.is_integer());
  EXPECT_THROW(huge.as_int(), Error);
  EXPECT_THROW(Json::parse("2.5").as_int(), Error);
}

TEST(Json, Strings) {
  EXPECT_EQ(Json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(Json::parse(R"("\u0041\u00e9\u20ac")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(Json::parse(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");  // surrogate pair
  EXPECT_EQ(Json::parse("\"caf\xC3\xA9\"").as_string(), "caf\xC3\xA9");         // raw UTF-8 kept
  EXPECT_EQ(Json::parse(R"("")").as_string(), "");
}

TEST(Json, ContainersKeepInsertionOrder) {
  const Json j = Json::parse(R"( { "z" : 1, "a" : [true, null, {"k": "v"}], "m" : {} } )");
  ASSERT_TRUE(j.is_object());
  const auto& obj = j.as_object();
  ASSERT_EQ(obj.size(), 3u);
  EXPECT_EQ(obj[0].first, "z");
  EXPECT_EQ(obj[1].first, "a");
  EXPECT_EQ(obj[2].first, "m");
  EXPECT_EQ(j.at("a").as_array().size(), 3u);
  EXPECT_EQ(j.at("a").as_array()[2].at("k").as_string(), "v");
  EXPECT_TRUE(j.at("m").as_object().empty());
  EXPECT_EQ(j.find("nope"), nullptr);
  EXPECT_THROW(j.at("nope"), Error);
  EXPECT_TRUE(Json::parse("[]").as_array().empty());
}

TEST(Json, TypeMismatchThrowsNamingTheValue) {
  const Json j = Json::parse(R"({"n": 1})");
  try {
    j.at("n").as_string("header.n");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "header.n");
    EXPECT_NE(std::string(e.what()).find("expected a JSON string, got number"), std::string::npos);
  }
}

TEST(Json, RejectsInvalidText) {
  const char* bad[] = {
      "",
      "   ",
      "[1,]",
      "{\"a\":1,}",
      "01",
      "-",
      "1.",
      ".5",
      "1e",
      "+1",
      "'a'",
      "\"abc",
      "\"a\x01\"",
      "\"\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "[1 2]",
      "{\"a\" 1}",
      "{1:2}",
      "nul",
      "NaN",
      "Infinity",
      "[1] x",
      "// c\n1",
      "\"\xC3\"",
      "\"\xFF\"",
      "\"\xED\xA0\x80\"",
      "1e999",
      "{\"a\":1,\"a\":2}",
  };
  for (const char* text : bad) {
    SCOPED_TRACE(text);
    parse_error(text);
  }
}

TEST(Json, ErrorsGiveTheByteOffset) {
  EXPECT_NE(parse_error("[1, 2,, 3]").find("byte 6"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\":1,\"a\":2}").find("duplicate key \"a\""), std::string::npos);
  EXPECT_NE(parse_error("[1] x").find("after the JSON value"), std::string::npos);
}

TEST(Json, RejectsDeepNesting) {
  EXPECT_NE(parse_error(std::string(100000, '[')).find("nesting"), std::string::npos);
  EXPECT_NO_THROW(Json::parse(std::string(200, '[') + std::string(200, ']')));
}

TEST(Json, DumpIsCompactAndRoundTrips) {
  Json j = Json::object();
  j.set("dtype", Json("BF16"));
  Json shape = Json::array();
  shape.push_back(Json(2));
  shape.push_back(Json(std::int64_t{9007199254740993}));
  j.set("shape", shape);
  j.set("x", Json(0.1));
  j.set("s", Json(std::string("q\"\\\n\x01")));
  j.set("b", Json(false));
  j.set("z", Json());
  j.set("x", Json(-2.5));  // replaces, keeps position
  const std::string text = j.dump();
  EXPECT_EQ(
      text,
      R"({"dtype":"BF16","shape":[2,9007199254740993],"x":-2.5,"s":"q\"\\\n\u0001","b":false,"z":null})");
  EXPECT_EQ(Json::parse(text).dump(), text);
  EXPECT_EQ(Json(0.1).dump(), "0.1");  // shortest round-trip form
  EXPECT_EQ(Json(1e-5).dump(), "1e-05");
  EXPECT_THROW(Json(std::nan("")).dump(), Error);
  EXPECT_THROW(Json(INFINITY).dump(), Error);
}
