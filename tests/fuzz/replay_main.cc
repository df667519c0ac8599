// A main() for fuzz targets in builds without libFuzzer (g++): it feeds each
// file named on the command line, or each regular file of each directory
// named there, to LLVMFuzzerTestOneInput, in sorted order. A broken property
// aborts inside the target; this program exits 1 when an input cannot be read
// or when no input was found, so an empty corpus cannot pass unnoticed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool CollectInputs(const fs::path& arg, std::vector<fs::path>* inputs) {
  std::error_code ec;
  if (!fs::is_directory(arg, ec)) {
    inputs->push_back(arg);
    return true;
  }
  fs::directory_iterator it(arg, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) inputs->push_back(it->path());
  }
  if (ec) std::fprintf(stderr, "replay: cannot list %s: %s\n", arg.c_str(), ec.message().c_str());
  return !ec;
}

bool ReadFile(const fs::path& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], &inputs)) return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s <corpus dir or file>...; no inputs found\n", argv[0]);
    return 1;
  }
  for (const fs::path& path : inputs) {
    std::string bytes;
    if (!ReadFile(path, &bytes)) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 1;
    }
    std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, all passed\n", inputs.size());
  return 0;
}
