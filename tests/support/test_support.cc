// Implementation of the shared test helpers.
#include "support/test_json.h"
#include "support/test_support.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "util/utf8.h"

extern char** environ;

namespace kvtier::testing {

std::filesystem::path CompatDir() { return KVTIER_COMPAT_DIR; }

bool ResolverSaysNoSuchHost(const std::string& host) {
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, nullptr, &found);
  if (found != nullptr) freeaddrinfo(found);
  return rc == EAI_NONAME;
}

// $KVTIER_TEST_CLI runs the CLI tests against another build (e.g. an older
// one, to see a new test fail there).
std::filesystem::path CliPath() {
  const char* env = std::getenv("KVTIER_TEST_CLI");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env) : std::filesystem::path(KVTIER_CLI_PATH);
}
std::filesystem::path SourceDir() { return KVTIER_SOURCE_DIR; }

uint64_t TestSeed() {
  uint64_t seed = 0;
  if (const char* env = std::getenv("KVTIER_TEST_SEED"); env != nullptr && *env != '\0') {
    seed = std::strtoull(env, nullptr, 0);
  } else {
    seed = std::random_device{}();
    seed = (seed << 32) ^ std::random_device{}();
  }
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::fprintf(stderr, "[ seed     ] KVTIER_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

std::string ReadFileOrDie(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

nlohmann::json ReadJsonOrDie(const std::filesystem::path& path) {
  nlohmann::json doc = nlohmann::json::parse(ReadFileOrDie(path), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    ADD_FAILURE() << path << " is not valid JSON";
    return nullptr;
  }
  return doc;
}

void WriteFileOrDie(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

void WriteKeyFileOrDie(const std::filesystem::path& path, const std::string& bytes) {
  WriteFileOrDie(path, bytes);
  std::error_code ec;
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace, ec);
  if (ec) ADD_FAILURE() << "cannot chmod " << path << ": " << ec.message();
}

JobResult WaitForJob(FsTier* tier, uint64_t id, int timeout_ms) {
  std::vector<JobResult> done;
  for (int waited = 0; waited < timeout_ms; ++waited) {
    tier->PollFinished(&done);
    for (JobResult& r : done) {
      if (r.job_id == id) return std::move(r);
    }
    done.clear();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "job " << id << " did not finish within " << timeout_ms << " ms";
  return {};
}

const nlohmann::json& PyGolden() {
  static const nlohmann::json doc = ReadJsonOrDie(SourceDir() / "tests/data/py_golden.json");
  return doc;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-test-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

// Drains both pipes until EOF so a chatty child never blocks on a full pipe.
static void DrainPipes(int out_fd, int err_fd, CommandResult* result) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      (i == 0 ? result->out : result->err).append(buf, static_cast<size_t>(n));
    }
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& stdin_data) {
  CommandResult result;
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << " failed: " << rc;
    close(in_pipe[1]);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  // Inputs in tests are small (well under a pipe buffer), so write then close.
  if (!stdin_data.empty() && write(in_pipe[1], stdin_data.data(), stdin_data.size()) < 0) {
    ADD_FAILURE() << "writing child stdin failed";
  }
  close(in_pipe[1]);
  DrainPipes(out_pipe[0], err_pipe[0], &result);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

AlignedRows::AlignedRows(size_t n, uint64_t row_bytes_in, uint64_t seed)
    : data(static_cast<uint8_t*>(std::aligned_alloc(4096, n * row_bytes_in))), count(n), row_bytes(row_bytes_in) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n * row_bytes; ++i) data[i] = static_cast<uint8_t>(rng());
}

AlignedRows::~AlignedRows() { std::free(data); }

std::vector<std::span<const uint8_t>> AlignedRows::Const() const {
  std::vector<std::span<const uint8_t>> out;
  for (size_t i = 0; i < count; ++i) out.push_back(Row(i));
  return out;
}

std::vector<std::span<uint8_t>> AlignedRows::Mut() const {
  std::vector<std::span<uint8_t>> out;
  for (size_t i = 0; i < count; ++i) out.push_back(Row(i));
  return out;
}

OffloadKey Key(uint64_t i, const KeyShape& shape) {
  std::vector<uint8_t> bytes(32, shape.fill);
  for (int b = 0; b < 8; ++b) bytes[b] = static_cast<uint8_t>(i >> (8 * b));
  if (shape.last) bytes[31] = static_cast<uint8_t>(*shape.last + (shape.last_plus_i ? i : 0));
  return {BlockHash::FromBytes(bytes).value(), 0};
}

std::vector<OffloadKey> RandomKeys(size_t n, std::mt19937_64& rng) {
  std::vector<OffloadKey> keys(n);
  for (OffloadKey& key : keys) {
    uint8_t bytes[32];
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    key.hash = BlockHash::FromBytes(bytes).value();
  }
  return keys;
}

NamespaceSpec Spec(const std::string& model, std::vector<std::string> layers) {
  NamespaceSpec spec;
  spec.model_name = model;
  spec.kv_cache_groups.push_back({16, std::move(layers)});
  return spec;
}

SglangPageSpec SglangSpec(const std::string& model, const SglangShape& shape) {
  SglangPageSpec s;
  s.model_name = model;
  s.page_size = shape.page_size;
  s.mem_layout = "page_first";
  s.dtype = "bfloat16";
  s.k_bytes_per_token = shape.k_bytes_per_token;
  s.v_bytes_per_token = shape.v_bytes_per_token;
  s.layer_num = shape.layers;
  s.tp_size = shape.tp_size;
  return s;
}

std::string UnsafeToPrint(const std::string& text) {
  if (!internal::IsValidUtf8(text)) return "invalid UTF-8";
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    if ((b < 0x20 && b != '\n') || b == 0x7f) return "control byte " + std::to_string(b) + " at " + std::to_string(i);
  }
  return "";
}

}  // namespace kvtier::testing
