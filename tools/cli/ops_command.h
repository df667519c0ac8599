// Output of `kvtier du`, `kvtier fsck` and `kvtier gc` (text and JSON), and
// the size parser their flags use (durations: cli/duration.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvtier/ops.h"

namespace kvtier::internal {

// "1048576", "512K", "10G", "1.5T", "10GiB" -> bytes (binary units).
Result<uint64_t> ParseSizeBytes(std::string_view text);

// Runs a command that touches the volume in a child process and returns its
// exit code; 8 as soon as the child calls ExitHung (tools/cli/hung_guard.cc:
// a thread stuck on a hung FUSE mount cannot be killed, and would keep this
// process from exiting). Call it before any thread is started.
int RunGuarded(const std::function<int()>& body);
// Ends the command after a hung file-system call (kTimedOut from
// --io-timeout), its message printed: exit 8, at once, in the parent too.
// _exit skips the static destructors the stuck threads could race with.
[[noreturn]] void ExitHung();

// `du --top N --by bytes|age`: the n largest namespaces (kBytes: most bytes
// first) or the n coldest (kAge: oldest newest_activity first, one without
// blocks first of all), across engines; ties go by name.
enum class DuTopBy { kBytes, kAge };
struct DuTop {
  size_t n = 0;  // 0: every namespace, by name (no --top)
  DuTopBy by = DuTopBy::kBytes;
};
Result<DuTopBy> ParseDuTopBy(std::string_view text);
// Keeps r's top namespaces in that order; the totals stay the whole volume's.
void KeepTopNamespaces(const DuTop& top, DuReport* r);
// With a top, the reports say which (JSON "top": {n, by, of}; text "top n
// of m ... by ..."): `of` is the number of namespaces before KeepTopNamespaces.
nlohmann::json DuJson(const DuReport& r, const DuTop& top = {}, size_t of = 0);
std::string DuText(const DuReport& r, const DuTop& top = {}, size_t of = 0);
nlohmann::json FsckJson(const FsckReport& r);
std::string FsckText(const FsckReport& r);
nlohmann::json GcJson(const GcReport& r);
std::string GcText(const GcReport& r);

// A one-line progress display for stderr ("\r" updates), or nothing when
// stderr is not a terminal.
std::function<void(const ScanProgress&)> MakeProgressBar(std::string_view what);

}  // namespace kvtier::internal
