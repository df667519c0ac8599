// Proves that the Python-compatible JSON writer reproduces CPython's
// json.dumps bytes (reference output from tests/data/gen_py_golden.py): string
// escaping with ensure_ascii (control characters, DEL, quotes, backslashes,
// non-ASCII, astral characters as surrogate pairs), sort_keys over non-ASCII
// keys, the compact form hashed into namespace digests and the indent=2 form
// of config.json, including empty and nested containers. Invalid UTF-8 is
// rejected, not passed through.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "layout/py_json.h"
#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

const json& Golden() { return testing::PyGolden(); }

TEST(PyJson, StringsMatchCPython) {
  ASSERT_GE(Golden()["json_strings"].size(), 10u);
  for (const json& c : Golden()["json_strings"]) {
    std::string out;
    ASSERT_OK(PyJsonEscape(c["value"].get<std::string>(), &out));
    EXPECT_EQ(out, c["dumps"].get<std::string>());
  }
}

TEST(PyJson, DocumentsMatchCPythonCompactAndIndented) {
  ASSERT_GE(Golden()["json_docs"].size(), 5u);
  for (const json& c : Golden()["json_docs"]) {
    ASSERT_OK_AND_ASSIGN(std::string compact, PyJsonDumpsCompact(c["value"]));
    EXPECT_EQ(compact, c["compact"].get<std::string>());
    ASSERT_OK_AND_ASSIGN(std::string indented, PyJsonDumpsIndent2(c["value"]));
    EXPECT_EQ(indented, c["indent2"].get<std::string>());
  }
}

TEST(PyJson, AstralCharacterBecomesLowercaseSurrogatePair) {
  std::string out;
  ASSERT_OK(PyJsonEscape("\xf0\x9f\x98\x80", &out));  // U+1F600
  EXPECT_EQ(out, "\"\\ud83d\\ude00\"");
}

TEST(PyJson, InvalidUtf8IsRejected) {
  for (std::string bad : {std::string("\xff"), std::string("a\xc3"), std::string("\xed\xa0\x80"),
                          std::string("\xc0\xaf"), std::string("\xf4\x90\x80\x80")}) {
    std::string out;
    Status s = PyJsonEscape(bad, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "accepted bytes of length " << bad.size();
  }
}

TEST(PyJson, FloatsAreRefusedRatherThanMisprinted) {
  EXPECT_FALSE(PyJsonDumpsCompact(json(1.5)).ok());
}

}  // namespace
}  // namespace kvtier::internal
