// The JSON helpers of the tests, apart from test_support.h: nlohmann/json
// is the costliest header to compile (seconds a file), and most tests need
// none of it.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace kvtier::testing {

// Parses a JSON file; a missing or malformed file fails the test (and
// returns null) rather than throwing.
nlohmann::json ReadJsonOrDie(const std::filesystem::path& path);

// tests/data/py_golden.json: bytes CPython's pickle and json produce.
const nlohmann::json& PyGolden();

}  // namespace kvtier::testing
