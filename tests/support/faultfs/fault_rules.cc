#include "faultfs/fault_rules.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

namespace kvtier::faultfs {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(Op::kCount)> kOpNames = {
    "lookup", "open",    "read",     "write", "xattr", "rename",  "unlink",  "mkdir",
    "readdir", "statfs", "flush", "utimens", "truncate", "chmod", "symlink", "readlink"};

std::vector<std::string> SplitWords(std::string_view line) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) words.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}

bool ParseInt(std::string_view text, int* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

int ParseOp(std::string_view name) {
  if (name == "all") return -1;
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) return static_cast<int>(i);
  }
  return -2;
}

int ParseErrno(std::string_view name) {
  int number = 0;
  if (ParseInt(name, &number)) return number > 0 && number < 512 ? number : 0;
  // glibc names every errno ("EIO"), so no table of our own is needed.
  for (int e = 1; e < 512; ++e) {
    const char* known = strerrorname_np(e);
    if (known != nullptr && name == known) return e;
  }
  return 0;
}

bool FaultRules::Matches(const Rule& rule, Op op, std::string_view path,
                         std::string_view other_path) const {
  if (rule.op != -1 && rule.op != static_cast<int>(op)) return false;
  if (rule.path_substr.empty()) return true;
  return path.find(rule.path_substr) != std::string_view::npos ||
         (!other_path.empty() && other_path.find(rule.path_substr) != std::string_view::npos);
}

void FaultRules::SetStopCheck(std::function<bool()> stop) {
  std::lock_guard lock(mu_);
  stop_ = std::move(stop);
}

bool FaultRules::WaitForRelease(std::unique_lock<std::mutex>& lock) {
  const uint64_t generation = release_generation_;
  ++hung_;
  bool released = false;
  while (!released && !(stop_ && stop_())) {
    released = released_.wait_for(lock, std::chrono::milliseconds(100),
                                  [&] { return release_generation_ != generation; });
  }
  --hung_;
  return released;
}

Verdict FaultRules::Gate(Op op, std::string_view path, std::string_view other_path) {
  std::unique_lock lock(mu_);
  ++calls_[static_cast<size_t>(op)];
  for (const Rule& rule : rules_) {
    if (rule.kind == Kind::kHang && Matches(rule, op, path, other_path)) {
      // Released calls go through untouched, as if the server answered late.
      if (WaitForRelease(lock)) return {};
      return Verdict{ENOTCONN, false};
    }
  }
  Verdict verdict;
  int delay_ms = 0;
  for (auto it = rules_.begin(); it != rules_.end();) {
    if (!Matches(*it, op, path, other_path)) {
      ++it;
      continue;
    }
    if (it->kind == Kind::kDelay) delay_ms += it->value;
    if (it->kind == Kind::kShort) verdict.short_io = true;
    if (it->kind == Kind::kFail && verdict.error == 0) {
      verdict.error = it->value;
      if (it->count > 0 && --it->count == 0) {
        it = rules_.erase(it);
        continue;
      }
    }
    ++it;
  }
  lock.unlock();
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  return verdict;
}

// words: OP then the kind's arguments; "*" as PATHSUBSTR means any path.
std::string FaultRules::AddRule(Kind kind, const std::vector<std::string>& words) {
  if (words.size() < 2) return "err missing OP";
  Rule rule{kind, ParseOp(words[1]), "", 0, -1};
  if (rule.op == -2) return "err unknown op " + words[1];
  size_t next = 2;
  if (kind == Kind::kDelay || kind == Kind::kFail) {
    if (words.size() < 3) return "err missing argument";
    const bool parsed = kind == Kind::kDelay ? ParseInt(words[2], &rule.value) && rule.value >= 0
                                             : (rule.value = ParseErrno(words[2])) != 0;
    if (!parsed) return "err bad argument " + words[2];
    next = 3;
  }
  if (words.size() > next && words[next] != "*") rule.path_substr = words[next];
  ++next;
  if (kind == Kind::kFail && words.size() > next) {
    if (!ParseInt(words[next], &rule.count) || rule.count == 0 || rule.count < -1) {
      return "err bad count " + words[next];
    }
    ++next;
  }
  if (words.size() > next) return "err too many arguments";
  std::lock_guard lock(mu_);
  rules_.push_back(std::move(rule));
  return "ok";
}

std::string FaultRules::Command(std::string_view line) {
  const std::vector<std::string> words = SplitWords(line);
  if (words.empty()) return "err empty command";
  const std::string& verb = words[0];
  if (verb == "hang") return AddRule(Kind::kHang, words);
  if (verb == "delay") return AddRule(Kind::kDelay, words);
  if (verb == "fail") return AddRule(Kind::kFail, words);
  if (verb == "short") return AddRule(Kind::kShort, words);
  std::lock_guard lock(mu_);
  if (verb == "ping") return "ok";
  if (verb == "clear") {
    rules_.clear();
    return "ok";
  }
  if (verb == "release") {
    rules_.clear();
    ++release_generation_;
    released_.notify_all();
    return "ok";
  }
  if (verb == "hung") return std::to_string(hung_);
  if (verb == "calls" && words.size() == 2) {
    const int op = ParseOp(words[1]);
    if (op == -2) return "err unknown op " + words[1];
    uint64_t total = 0;
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (op == -1 || static_cast<int>(i) == op) total += calls_[i];
    }
    return std::to_string(total);
  }
  if (verb == "counts") {  // every op's count at one instant, "lookup=N open=N ..."
    std::string reply;
    for (size_t i = 0; i < calls_.size(); ++i) {
      reply += (i == 0 ? "" : " ") + std::string(kOpNames[i]) + "=" + std::to_string(calls_[i]);
    }
    return reply;
  }
  return "err unknown command " + verb;
}

}  // namespace kvtier::faultfs
