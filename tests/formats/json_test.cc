// The JSON value type: strict parsing, exact integers, escapes, error messages, and limits that
// keep hostile input (deep nesting, bad UTF-8) from doing harm.
#include "formats/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "support/expect_tpf_error.h"
#include "tpf/error.h"

namespace tpf::json {
namespace {

// Runs statement, which must throw tpf::Error(invalid_argument) whose message contains each part.
#define EXPECT_JSON_ERROR(statement, ...) \
  EXPECT_TPF_ERROR(statement, ::tpf::ErrorCode::invalid_argument, __VA_ARGS__)

Value parse_test(std::string_view text) { return parse(text, "test.json"); }

TEST(JsonTest, ParsesScalars) {
  EXPECT_TRUE(parse_test("null").is_null());
  EXPECT_EQ(parse_test("true").as_bool(), true);
  EXPECT_EQ(parse_test("false").as_bool(), false);
  EXPECT_EQ(parse_test("0").as_int(), 0);
  EXPECT_EQ(parse_test("-0").as_int(), 0);
  EXPECT_EQ(parse_test("42").as_int(), 42);
  EXPECT_EQ(parse_test("-7").as_int(), -7);
  EXPECT_EQ(parse_test("1.5").as_double(), 1.5);
  EXPECT_EQ(parse_test("-2.5e-3").as_double(), -2.5e-3);
  EXPECT_EQ(parse_test("\"hi\"").as_string(), "hi");
  EXPECT_EQ(parse_test(" \t\r\n[ 1 , {} ] \n").size(), 2u);
}

TEST(JsonTest, NumbersWithFractionOrExponentAreDoubles) {
  EXPECT_EQ(parse_test("1e3").type(), Type::number);
  EXPECT_EQ(parse_test("1E+3").as_double(), 1000.0);
  EXPECT_EQ(parse_test("3.0").type(), Type::number);
  // as_int refuses doubles even when integral, so a "3.0" offset is a clear error, not a guess.
  EXPECT_JSON_ERROR(parse_test("3.0").as_int(), "expected integer, got number");
  EXPECT_EQ(parse_test("3").as_double(), 3.0);
}

TEST(JsonTest, IntegersKeptExactUpToInt64Limits) {
  const Value max = parse_test("9223372036854775807");
  ASSERT_TRUE(max.is_int());
  EXPECT_EQ(max.as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(dump(max), "9223372036854775807");
  const Value min = parse_test("-9223372036854775808");
  ASSERT_TRUE(min.is_int());
  EXPECT_EQ(min.as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(dump(min), "-9223372036854775808");
  // One past the limit still parses, as an (inexact) double.
  const Value over = parse_test("9223372036854775808");
  EXPECT_EQ(over.type(), Type::number);
  EXPECT_EQ(over.as_double(), 9223372036854775808.0);
  EXPECT_EQ(parse_test("[9007199254740993]").at(size_t{0}).as_int(), 9007199254740993);
}

TEST(JsonTest, DoublesRoundTripAndStayDoubles) {
  for (double d : {0.1, -0.0, 1.0, 1e300, 5e-324, 123456.789, -1.0 / 3}) {
    const std::string text = dump(Value(d));
    const Value back = parse_test(text);
    EXPECT_EQ(back.type(), Type::number) << text;
    EXPECT_EQ(back.as_double(), d) << text;
    EXPECT_EQ(std::signbit(back.as_double()), std::signbit(d)) << text;
  }
  EXPECT_EQ(dump(Value(1.0)), "1.0");
  EXPECT_EQ(dump(Value(std::nan(""))), "null");
  EXPECT_EQ(dump(Value(-std::numeric_limits<double>::infinity())), "null");
  EXPECT_JSON_ERROR(parse_test("1e400"), "test.json", "byte 0", "number overflow");
}

TEST(JsonTest, StringEscapesDecode) {
  EXPECT_EQ(parse_test(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parse_test(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(parse_test(R"("\u0000")").as_string(), std::string(1, '\0'));
  EXPECT_EQ(parse_test("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").as_string(),
            "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_JSON_ERROR(parse_test(R"("\x")"), "byte 2", "forbidden character after backslash");
  EXPECT_JSON_ERROR(parse_test(R"("\u12G4")"), "byte 5", "must be followed by 4 hex digits");
  EXPECT_JSON_ERROR(parse_test("\"a\nb\""), "byte 2",
                    "control character U+000A (LF) must be escaped");
  EXPECT_JSON_ERROR(parse_test(R"("abc)"), "byte 4", "missing closing quote");
}

TEST(JsonTest, SurrogatePairsBecomeOneCodePoint) {
  EXPECT_EQ(parse_test(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");  // U+1F600
  EXPECT_EQ(parse_test(R"("\uDBFF\uDFFF")").as_string(), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  const char* high_alone = "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF";
  EXPECT_JSON_ERROR(parse_test(R"("\ud83d")"), high_alone);
  EXPECT_JSON_ERROR(parse_test(R"("\ud83dx")"), high_alone);
  EXPECT_JSON_ERROR(parse_test(R"("\ud83d\u0041")"), high_alone);
  EXPECT_JSON_ERROR(parse_test(R"(["\ude00"])"), "byte 7",
                    "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF");
}

TEST(JsonTest, InvalidUtf8Rejected) {
  for (const char* bad :
       {"\xC0\x80", "\xC3", "\xE2\x82", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF", "\x80"}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << bad;
    std::string quoted = "\"";
    quoted.append(bad).append("\"");
    EXPECT_JSON_ERROR(parse_test(quoted), "invalid JSON at byte", "ill-formed UTF-8 byte");
  }
  EXPECT_TRUE(is_valid_utf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
}

TEST(JsonTest, DumpEscapesSoOutputParsesBack) {
  // Appended: GCC 12 warns -Warray-bounds on string + char + "...", wrongly.
  std::string nasty = "q\"b\\s/\b\f\n\r\t\x01\x1F\x7F";
  nasty.push_back('\0');
  nasty.append("\xC3\xA9");
  const std::string text = dump(Value(nasty));
  EXPECT_EQ(text, "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\x7F\\u0000\xC3\xA9\"");
  EXPECT_EQ(parse_test(text).as_string(), nasty);
  // Bytes that are not UTF-8 cannot be written as JSON: they become U+FFFD, never invalid output.
  const std::string replaced = dump(Value("a\xFF" "b"));
  EXPECT_EQ(replaced, "\"a\xEF\xBF\xBD" "b\"");
  EXPECT_EQ(parse_test(replaced).as_string(), "a\xEF\xBF\xBD" "b");
}

TEST(JsonTest, RoundTripKeepsStructureAndKeyOrder) {
  const std::string text =
      R"({"z":1,"a":[true,false,null,-3,2.5,"s",[],{}],"m":{"y":{"x":[[1]]}},"e":""})";
  const Value value = parse_test(text);
  EXPECT_EQ(dump(value), text);
  EXPECT_EQ(value.as_object().front().first, "z");
  EXPECT_EQ(parse_test(dump(value)), value);
}

TEST(JsonTest, DuplicateKeysRejectedWithTheKeyAndOffset) {
  EXPECT_JSON_ERROR(parse_test(R"({"a":1, "b":2, "a":3})"), "test.json", "byte 15",
                    "duplicate key \"a\"");
  // Different nesting levels are different objects.
  EXPECT_NO_THROW(parse_test(R"({"a":{"a":1}})"));
}

TEST(JsonTest, DeepNestingRejectedWithoutRecursingFurther) {
  const std::string ok = std::string(kMaxDepth, '[') + std::string(kMaxDepth, ']');
  EXPECT_NO_THROW(parse_test(ok));
  const std::string too_deep = std::string(kMaxDepth + 1, '[') + std::string(kMaxDepth + 1, ']');
  EXPECT_JSON_ERROR(parse_test(too_deep), "byte 128", "nesting deeper than 128");
  // Far past any stack: rejected at the limit, not by a crash.
  EXPECT_JSON_ERROR(parse_test(std::string(1000000, '[')), "nesting deeper");
  EXPECT_JSON_ERROR(parse_test(std::string(1000000, '{')), "object key", "expected string literal");
  std::string objects;
  for (int i = 0; i <= kMaxDepth; ++i) objects += "{\"k\":";
  EXPECT_JSON_ERROR(parse_test(objects), "nesting deeper");
}

TEST(JsonTest, TrailingGarbageAndNonJsonRejected) {
  EXPECT_JSON_ERROR(parse_test("1 2"), "byte 2",
                    "unexpected number literal; expected end of input");
  EXPECT_JSON_ERROR(parse_test("{} x"), "byte 3", "invalid literal");
  EXPECT_JSON_ERROR(parse_test("01"), "byte 1");
  EXPECT_JSON_ERROR(parse_test("[1,]"), "byte 3", "unexpected ']'");
  EXPECT_JSON_ERROR(parse_test(R"({"a":1,})"), "byte 7", "object key", "expected string literal");
  EXPECT_JSON_ERROR(parse_test(R"({"a" 1})"), "byte 5", "expected ':'");
  EXPECT_JSON_ERROR(parse_test("[1 2]"), "byte 3", "expected ']'");
  for (const char* bad : {"", "  ", "1.", ".5", "+1", "-", "1e", "'a'", "nul", "True", "NaN", "[",
                          "{", "{\"a\":", "\x01"}) {
    EXPECT_JSON_ERROR(parse_test(bad), "test.json", "invalid JSON at byte");
  }
  EXPECT_JSON_ERROR(parse_test(std::string("1\0", 2)), "byte 1", "NUL byte");
  EXPECT_JSON_ERROR(parse_test(std::string("[1]\0garbage", 12)), "byte 3", "NUL byte");
}

TEST(JsonTest, ErrorNamesWhatOffsetExpectedAndFound) {
  EXPECT_JSON_ERROR(parse("[1, x]", "config.json"),
                    "config.json: invalid JSON at byte 4 (line 1, column 5)", "invalid literal");
  EXPECT_JSON_ERROR(parse("[1", "log.jsonl line 3"), "log.jsonl line 3", "byte 2",
                    "unexpected end of input");
  EXPECT_JSON_ERROR(parse("{\n  \"a\": 1,\n  \"a\": 2\n}", "config.json"),
                    "byte 14 (line 3, column 3)", "duplicate key \"a\"");
}

TEST(JsonTest, AccessorsThrowOnWrongTypeOrMissingMember) {
  const Value value = parse_test(R"({"n":1,"s":"x","a":[1,2]})");
  EXPECT_EQ(value.at("n").as_int(), 1);
  EXPECT_EQ(value.find("s")->as_string(), "x");
  EXPECT_EQ(value.find("missing"), nullptr);
  EXPECT_EQ(value.at("a").at(size_t{1}).as_int(), 2);
  EXPECT_EQ(value.size(), 3u);
  EXPECT_JSON_ERROR(value.at("s").as_int(), "expected integer, got string");
  EXPECT_JSON_ERROR(value.at("n").as_string(), "expected string, got integer");
  EXPECT_JSON_ERROR(value.at("n").as_bool(), "expected bool, got integer");
  EXPECT_JSON_ERROR(value.at("missing"), "missing key \"missing\"");
  EXPECT_JSON_ERROR(value.at("a").at(size_t{2}), "index 2 out of range for an array of 2");
  EXPECT_JSON_ERROR(value.at("a").find("x"), "expected object, got array");
  EXPECT_JSON_ERROR(value.at("n").size(), "expected object, got integer");
  EXPECT_JSON_ERROR(Value(1.5).as_array(), "expected array, got number");
}

TEST(JsonTest, BuildersAndIntegerConversions) {
  Value object;
  object.set("b", 1);
  object.set("a", "x");
  object.set("b", Array{Value(), uint64_t{7}, int8_t{-1}, size_t{3}});
  Value list;
  list.push_back(false);
  list.push_back(Object{{"k", 2.5}});
  object.set("l", std::move(list));
  EXPECT_EQ(dump(object), R"({"b":[null,7,-1,3],"a":"x","l":[false,{"k":2.5}]})");
  EXPECT_JSON_ERROR((void)Value(std::numeric_limits<uint64_t>::max()), "does not fit in int64");
  EXPECT_JSON_ERROR(Value(1).set("k", 1), "expected object, got integer");
  EXPECT_JSON_ERROR(Value("s").push_back(1), "expected array, got string");
}

}  // namespace
}  // namespace tpf::json
