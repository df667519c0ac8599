// Proves that `kvtier du`, `fsck` and `gc` report names that are any bytes
// (invalid UTF-8, newlines, escape characters) on a real tree through the
// real binary: --json output parses with a strict parser and its "<key>_hex"
// members give back the exact bytes; text output quotes such names in bash's
// $'...' form (which bash turns back into the same bytes) and holds no raw
// control byte or invalid UTF-8, while plain layout names print unquoted;
// and gc --json, which deletes before it reports, exits normally. Such names
// are never layout names (FORMAT.md L89, L96): a namespace directory with one
// is a stray at the root and is not walked, a temp-like file is a bad name,
// and gc deletes neither. Seeded random byte strings check the same two
// encodings exhaustively.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "support/test_support.h"
#include "util/hex.h"
#include "util/name_escape.h"
#include "util/utf8.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::CliPath;
using testing::RunCommand;

// Invalid UTF-8 (a lone 0xff, a stray continuation byte), a newline and ESC.
const std::string kOdd = std::string("\xff") + "\x80" + "\n" + "\x1b" + "[31m";
const std::string kPlainNs = "plain_0123456789ab";
const std::string kOddNs = "m" + kOdd + "_0123456789ab";
const std::string kBlock = "abcde" + std::string(59, '0') + ".bin";

class CliNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Dir(kPlainNs);
    Dir(kOddNs);
    File(kPlainNs + "_r0/abc/de_g0/" + kBlock, 16);
    File(kOddNs + "_r0/abc/de_g0/" + kBlock, 16);
    File(kPlainNs + "/README", 1);  // a plain stray: printed unquoted
    for (const std::string& rel : {stray_, shard_, tmp_, probe_, root_stray_}) {
      if (rel.ends_with("_g0")) {
        Dir(rel);
      } else {
        File(rel, 1);
      }
    }
    File(exact_tmp_, 1);
    File(exact_probe_, 1);
    for (const std::string& rel : {tmp_, probe_, exact_tmp_, exact_probe_}) AgeHours(rel, 2);
  }

  // The names holding kOdd that fsck reports: the namespace-like and block-
  // directory-like names at the root (strays: not walked, so the stray and
  // probe planted inside them go unseen), a shard directory and a temp-like
  // file (bad names), and a stray at the root.
  std::vector<std::string> OddNames() const { return {kOddNs, kOddNs + "_r0", shard_, tmp_, root_stray_}; }

  void Dir(const std::string& rel) { fs::create_directories(root_.path() / rel); }
  void File(const std::string& rel, size_t bytes) {
    fs::create_directories((root_.path() / rel).parent_path());
    testing::WriteFileOrDie(root_.path() / rel, std::string(bytes, 'x'));
  }
  void AgeHours(const std::string& rel, int hours) {
    const timespec ts{time(nullptr) - hours * 3600, 0};
    const timespec times[2] = {ts, ts};
    ASSERT_EQ(utimensat(AT_FDCWD, (root_.path() / rel).c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
  }
  testing::CommandResult Kvtier(std::vector<std::string> args) {
    args.insert(args.begin(), CliPath());
    args.push_back(root_.path().string());
    return RunCommand(args);
  }

  const std::string stray_ = kOddNs + "/stray" + kOdd;
  const std::string shard_ = kPlainNs + "_r0/abc/d" + kOdd + "_g0";
  const std::string tmp_ = kPlainNs + "_r0/abc/de_g0/" + kOdd + ".bin_7.tmp";
  const std::string probe_ = kOddNs + "/.o_direct_probe_" + kOdd + ".tmp";
  const std::string root_stray_ = "stray" + kOdd;
  const std::string exact_tmp_ = kPlainNs + "_r0/abc/de_g0/" + kBlock + "_7.tmp";
  const std::string exact_probe_ = kPlainNs + "/.o_direct_probe_5.tmp";
  testing::TempDir root_;
};

// Parses with nlohmann (which refuses invalid UTF-8 and lone surrogates);
// null (after a failure) when it does not.
nlohmann::json ParseStrict(const testing::CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "exit " << r.exit_code << ", output not JSON:\n" << r.out << r.err;
  return j;
}

// The exact bytes of member `key` of `o`: from "<key>_hex" when present.
std::string Bytes(const nlohmann::json& o, const std::string& key) {
  if (!o.contains(key + "_hex")) return o.at(key).get<std::string>();
  auto bytes = internal::HexDecode(o.at(key + "_hex").get<std::string>());
  EXPECT_TRUE(bytes.has_value());
  EXPECT_FALSE(internal::IsValidUtf8(std::string(bytes->begin(), bytes->end())));
  return bytes ? std::string(bytes->begin(), bytes->end()) : "";
}

std::set<std::string> Paths(const nlohmann::json& list, const std::string& key) {
  std::set<std::string> out;
  for (const auto& o : list) out.insert(Bytes(o, key));
  return out;
}

// What bash makes of each quoted word: the round trip the quoting promises.
std::vector<std::string> BashWords(const std::vector<std::string>& quoted) {
  std::string script = "printf '%s\\0'";
  for (const std::string& q : quoted) script += " " + q;
  auto r = RunCommand({"/bin/bash", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> words;
  for (size_t at = 0, end; (end = r.out.find('\0', at)) != std::string::npos; at = end + 1) {
    words.push_back(r.out.substr(at, end - at));
  }
  return words;
}

TEST_F(CliNamesTest, DuJsonParsesAndGivesBackTheBytes) {
  auto r = Kvtier({"du", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseStrict(r);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(Paths(j["namespaces"], "dir"), (std::set<std::string>{kPlainNs})) << "invalid UTF-8 is no namespace (L89)";
  EXPECT_FALSE(j["namespaces"][0].contains("dir_hex")) << "a plain name gets no _hex member";
}

TEST_F(CliNamesTest, FsckJsonParsesAndGivesBackTheBytes) {
  auto r = Kvtier({"fsck", "--json"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  const nlohmann::json j = ParseStrict(r);
  ASSERT_TRUE(j.is_object());
  const std::set<std::string> paths = Paths(j["findings"], "path");
  for (const std::string& name : OddNames()) EXPECT_EQ(paths.count(name), 1u) << internal::QuoteName(name);
  EXPECT_EQ(paths.count(kPlainNs + "/README"), 1u);
}

TEST_F(CliNamesTest, GcJsonDeletesThenReportsNormally) {
  auto r = Kvtier({"gc", "--json"});
  ASSERT_EQ(r.exit_code, 0) << "exit " << r.exit_code << ": " << r.err;
  const nlohmann::json j = ParseStrict(r);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(Paths(j["reclaimed"], "path"), (std::set<std::string>{exact_tmp_, exact_probe_}));
  for (const std::string& rel : {exact_tmp_, exact_probe_}) EXPECT_FALSE(fs::exists(fs::symlink_status(root_.path() / rel)));
  for (const std::string& rel : {tmp_, probe_}) {
    EXPECT_TRUE(fs::exists(fs::symlink_status(root_.path() / rel))) << "not a layout name: never deleted";
  }
}

TEST_F(CliNamesTest, TextQuotesOddNamesAndKeepsPlainOnes) {
  auto du = Kvtier({"du"});
  auto fsck = Kvtier({"fsck"});
  auto gc = Kvtier({"gc", "--dry-run"});
  ASSERT_EQ(du.exit_code, 0) << du.err;
  ASSERT_EQ(fsck.exit_code, 4) << fsck.err;
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  for (const auto* r : {&du, &fsck, &gc}) EXPECT_EQ(testing::UnsafeToPrint(r->out), "") << r->out;
  std::vector<std::string> quoted;
  for (const std::string& name : OddNames()) quoted.push_back(internal::QuoteName(name));
  for (const std::string& q : quoted) {
    const bool listed = fsck.out.find(" " + q + "\n") != std::string::npos || fsck.out.find(" " + q + ": ") != std::string::npos;
    EXPECT_TRUE(listed) << q << "\n" << fsck.out;
  }
  EXPECT_EQ(du.out.find(internal::QuoteName(kOddNs)), std::string::npos) << du.out;
  EXPECT_NE(gc.out.find("would remove " + exact_tmp_ + " ("), std::string::npos) << gc.out;
  EXPECT_EQ(gc.out.find(internal::QuoteName(tmp_)), std::string::npos) << gc.out;
  EXPECT_EQ(quoted[4], "$'stray\\xff\\x80\\n\\x1b[31m'");
  EXPECT_EQ(BashWords(quoted), OddNames());
  // Plain names: unquoted, the du name column 52 wide.
  EXPECT_NE(fsck.out.find("stray_file (L90) " + kPlainNs + "/README\n"), std::string::npos) << fsck.out;
  EXPECT_NE(du.out.find("\n" + kPlainNs + std::string(52 - kPlainNs.size(), ' ') + " "), std::string::npos) << du.out;
}

// Random byte strings: the JSON form parses and gives back the bytes; the
// quoted form is safe text that bash turns back into the bytes.
TEST(NameEscape, RandomBytesRoundTrip) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  // Bytes that make the interesting cases likely: ASCII, controls, quotes,
  // leads and continuations of multibyte sequences, never-valid bytes.
  const std::string palette = std::string("a/ '\"\\\n\t\x1b\x7f") + "\xc2\x85\xe2\x80\xae\xed\xa0\xf0\x9f\x98\x80\xff\xfe\xc0\x80";
  std::vector<std::string> names, quoted;
  for (int n = 0; n < 300; ++n) {
    std::string s;
    for (size_t len = rng() % 12; s.size() < len;) {
      s += rng() % 4 ? palette[rng() % palette.size()] : static_cast<char>(1 + rng() % 255);
    }
    nlohmann::json j = {{"path", s}, {"list", {s}}};
    internal::MakeJsonUtf8(&j);
    const nlohmann::json back = nlohmann::json::parse(j.dump(2), nullptr, false);
    ASSERT_FALSE(back.is_discarded()) << "seed " << seed;
    EXPECT_EQ(Bytes(back, "path"), s) << "seed " << seed;
    const std::string q = internal::QuoteName(s);
    EXPECT_EQ(testing::UnsafeToPrint(q), "") << "seed " << seed << " " << q;
    EXPECT_EQ(testing::UnsafeToPrint(internal::EscapeUnprintable(s)), "") << "seed " << seed;
    EXPECT_EQ(q == s, !internal::NameNeedsQuoting(s));
    if (!s.empty()) {
      names.push_back(s);
      quoted.push_back(internal::NameNeedsQuoting(s) ? q : "'" + s + "'");  // a plain name may hold * or $
    }
  }
  EXPECT_EQ(BashWords(quoted), names) << "seed " << seed;
}

}  // namespace
}  // namespace kvtier
