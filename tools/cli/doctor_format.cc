// Text and JSON forms of `kvtier doctor`'s report (cli/doctor_command.h).
#include <cstdio>
#include <string>

#include "cli/doctor_command.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Ms(const CallLatency& l) {
  return l.median_us < 1000 ? Fmt("%.0f us", l.median_us) : Fmt("%.2f ms", l.median_us / 1000);
}

nlohmann::json ProbeJson(const Probe& p) { return {{"verdict", VerdictName(p.verdict)}, {"detail", p.detail}}; }

nlohmann::json LatencyJson(const CallLatency& l) {
  return {{"samples", l.samples}, {"median_us", l.median_us}, {"max_us", l.max_us}};
}

std::string ProbeText(const Probe& p) { return VerdictName(p.verdict) + (p.detail.empty() ? "" : " (" + p.detail + ")"); }

std::string DirectText(const DoctorReport& r) {
  std::string out = ProbeText(r.o_direct);
  if (r.o_direct.verdict != Verdict::kYes) return out;
  out += r.o_direct_align != 0 ? ", alignment " + std::to_string(r.o_direct_align) + " B (measured)" : ", alignment unknown";
  if (r.statx_dio_mem_align != 0) {
    out += "; statx: memory " + std::to_string(r.statx_dio_mem_align) + " B, offset " + std::to_string(r.statx_dio_offset_align) + " B";
  }
  return out;
}

std::string OnOff(bool on) { return on ? "on" : "off"; }

std::string Line(const char* label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "  %-17s", label);
  return buf + value + "\n";
}

std::string Found(const DoctorReport& r) {
  const VolumeKind& v = r.volume;
  std::string out = "found\n";
  out += Line("filesystem", v.fs_name + " (statfs magic " + Hex(v.fs_magic) + "), mount type " +
                                (v.mount_type.empty() ? "?" : v.mount_type) + " at " + (v.mount_point.empty() ? "?" : v.mount_point) +
                                (v.local ? ", local" : v.network_or_fuse ? ", network or FUSE" : ""));
  out += Line("writable", ProbeText(r.writable));
  out += Line("user xattrs", ProbeText(r.user_xattrs));
  out += Line("O_DIRECT", DirectText(r));
  out += Line("atomic rename", ProbeText(r.rename));
  out += Line("link", ProbeText(r.link));
  out += Line("atime update", ProbeText(r.atime) + (r.atime.verdict == Verdict::kYes ? ": an explicit update sticks" : ""));
  if (r.create.samples > 0) {
    out += Line("latency", "stat " + Ms(r.stat) + ", create " + Ms(r.create) + ", rename " + Ms(r.rename_call) +
                               " (median of " + std::to_string(r.create.samples) + " calls each)");
  }
  if (r.write_mib_s > 0) {
    out += Line("throughput", Fmt("write %.0f MiB/s", r.write_mib_s) + Fmt(", read %.0f MiB/s", r.read_mib_s) + " (" +
                                  std::to_string(r.io_bytes >> 10) + " KiB" + (r.io_direct ? ", O_DIRECT" : ", buffered") + ")");
  }
  return out;
}

std::string Picks(const DoctorReport& r) {
  std::string out = "kvtier's \"auto\" settings here\n";
  out += Line("checksum", std::string(ChecksumPlaceName(r.checksum_place)) +
                              (r.checksum_place == ChecksumPlace::kXattr ? " (user.vllm.kv_crc32c)" : " (after the block's bytes)"));
  out += Line("io_backend", std::string(BackendName(r.io_backend)) +
                                (r.volume.network_or_fuse ? " (each call may be a round trip: a thread per call in flight)" : ""));
  out += Line("bounce_loads", OnOff(r.bounce_loads));
  out += Line("inline_metadata", OnOff(r.inline_metadata) + " (io_uring only)");
  out += Line("o_direct", OnOff(r.use_o_direct));
  return out;
}

std::string List(const char* title, const std::vector<std::string>& items) {
  if (items.empty()) return "";
  std::string out = std::string(title) + "\n";
  for (const std::string& item : items) out += "  - " + item + "\n";
  return out;
}

}  // namespace

nlohmann::json DoctorJson(const DoctorReport& r) {
  const VolumeKind& v = r.volume;
  nlohmann::json j;
  j["root"] = EscapeUnprintable(r.root);
  j["filesystem"] = {{"name", v.fs_name}, {"statfs_magic", Hex(v.fs_magic)}, {"mount_type", v.mount_type},
                     {"mount_point", EscapeUnprintable(v.mount_point)}, {"local", v.local}, {"network_or_fuse", v.network_or_fuse}};
  j["probes"] = {{"writable", ProbeJson(r.writable)}, {"user_xattrs", ProbeJson(r.user_xattrs)},
                 {"o_direct", ProbeJson(r.o_direct)}, {"rename", ProbeJson(r.rename)},
                 {"link", ProbeJson(r.link)}, {"atime", ProbeJson(r.atime)}};
  j["probes"]["o_direct"]["align_bytes"] = r.o_direct_align;
  j["probes"]["o_direct"]["statx_mem_align"] = r.statx_dio_mem_align;
  j["probes"]["o_direct"]["statx_offset_align"] = r.statx_dio_offset_align;
  j["latency"] = {{"stat", LatencyJson(r.stat)}, {"create", LatencyJson(r.create)}, {"rename", LatencyJson(r.rename_call)}};
  j["throughput"] = {{"bytes", r.io_bytes}, {"o_direct", r.io_direct}, {"write_mib_s", r.write_mib_s}, {"read_mib_s", r.read_mib_s}};
  j["auto"] = {{"checksum", ChecksumPlaceName(r.checksum_place)}, {"io_backend", BackendName(r.io_backend)},
               {"bounce_loads", r.bounce_loads}, {"inline_metadata", r.inline_metadata}, {"o_direct", r.use_o_direct}};
  j["warnings"] = r.warnings;
  j["problems"] = r.problems;
  j["scratch"] = EscapeUnprintable(r.scratch);
  j["scratch_removed"] = r.scratch_removed;
  j["can_run"] = r.problems.empty();
  j["exit_code"] = r.ExitCode();
  return j;
}

std::string DoctorText(const DoctorReport& r) {
  std::string out = "kvtier doctor " + EscapeUnprintable(r.root) + "\n\n" + Found(r) + "\n" + Picks(r) + "\n";
  out += List("warnings", r.warnings);
  out += List("problems (kvtier cannot run here)", r.problems);
  if (!r.scratch_removed) out += "doctor's scratch directory " + EscapeUnprintable(r.scratch) + " was not fully removed\n";
  out += r.problems.empty() ? "result: kvtier can run here (exit 0)\n" : "result: kvtier cannot run here (exit 1)\n";
  return out;
}

}  // namespace kvtier::internal
