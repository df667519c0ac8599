// Proves that PickleWriter emits byte for byte what CPython's C pickler
// (protocol 5) emits: ints at every opcode boundary (BININT1/2, BININT,
// LONG1 with its sign-byte rule, LONG4), short and long str/bytes, tuples of
// every arity, the singleton-string memo (BINGET), frames split at the 64 KiB
// target, frames under 4 bytes dropped, and payloads >= 64 KiB written outside
// frames. The reference bytes come from CPython itself via
// tests/data/gen_py_golden.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <set>

#include "hash/pickle_writer.h"
#include "support/test_json.h"
#include "support/test_support.h"
#include "util/hex.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

const json& Golden() { return testing::PyGolden(); }

void Emit(const json& d, PickleWriter* w) {
  const std::string t = d["t"];
  if (t == "int") {
    w->Int(BigInt::FromDecimal(d["v"].get<std::string>()).value());
  } else if (t == "str") {
    w->Str(d["v"].get<std::string>());
  } else if (t == "bytes") {
    w->Bytes(*HexDecode(d["hex"].get<std::string>()));
  } else if (t == "none") {
    w->None();
  } else if (t == "tuple") {
    w->TupleBegin(d["items"].size());
    for (const json& item : d["items"]) Emit(item, w);
    w->TupleEnd(d["items"].size());
  } else if (t == "int_tuple") {
    const int64_t start = d["start"], count = d["count"], mod = d["mod"];
    w->TupleBegin(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) w->Int(start + (mod ? i % mod : i));
    w->TupleEnd(static_cast<size_t>(count));
  } else {
    FAIL() << "unknown object kind " << t;
  }
}

class PickleGolden : public ::testing::TestWithParam<size_t> {};

TEST_P(PickleGolden, MatchesCPython) {
  const json& c = Golden()["pickle"][GetParam()];
  ByteSink sink;
  PickleWriter w(&sink);
  w.Begin();
  Emit(c["object"], &w);
  w.Finish();
  const std::string expected = c["pickle_hex"];
  const std::string actual = HexEncode(sink.view());
  if (actual != expected) {
    size_t at = 0;
    while (at < actual.size() && at < expected.size() && actual[at] == expected[at]) ++at;
    FAIL() << c["name"] << ": first difference at byte " << at / 2 << " of " << expected.size() / 2
           << "\n  kvtier:  " << actual.substr(at > 20 ? at - 20 : 0, 80)
           << "\n  CPython: " << expected.substr(at > 20 ? at - 20 : 0, 80);
  }
}

INSTANTIATE_TEST_SUITE_P(CPython, PickleGolden,
                         ::testing::Range<size_t>(0, Golden()["pickle"].size()),
                         [](const ::testing::TestParamInfo<size_t>& param) {
                           std::string name = Golden()["pickle"][param.param]["name"];
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(PickleWriter, GoldenFileCoversTheFrameAndLongCases) {
  // Guards the generator: the cases that exercise framing must be present.
  std::set<std::string> names;
  for (const json& c : Golden()["pickle"]) names.insert(c["name"]);
  for (const char* needed : {"block_20000_tokens", "str_70000", "singleton_strings_memo", "none"}) {
    EXPECT_TRUE(names.count(needed)) << needed;
  }
}

TEST(PickleWriter, WriterIsReusableAcrossPickles) {
  ByteSink sink;
  PickleWriter w(&sink);
  w.Begin();
  w.Str("a");
  w.Finish();
  const std::string first = HexEncode(sink.view());
  w.Begin();  // must forget the memo and the frame of the first pickle
  w.Str("a");
  w.Finish();
  EXPECT_EQ(HexEncode(sink.view()), first);
  EXPECT_EQ(first, "8005" "950500000000000000" "8c0161" "94" "2e");  // pickle.dumps("a", 5)
}

}  // namespace
}  // namespace kvtier::internal
