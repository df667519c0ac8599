// Warnings logged the first time per kind, for the life of the object: a
// front end whose engine calls it every step must not flood the log with
// one failure repeated (a full disk, a bad argument).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "util/log.h"

namespace kvtier::internal {

class LogOnce {
 public:
  // Kinds are 0 .. kinds - 1; every message starts with "<prefix>: ".
  LogOnce(std::string prefix, size_t kinds)
      : prefix_(std::move(prefix)), logged_(std::make_unique<std::atomic<bool>[]>(kinds)) {}

  // Logs "<prefix>: <message> (logged once)" unless `kind` was logged before.
  void Warn(size_t kind, const std::string& message) {
    if (!logged_[kind].exchange(true)) LogWarning(prefix_ + ": " + message + " (logged once)");
  }

 private:
  const std::string prefix_;
  const std::unique_ptr<std::atomic<bool>[]> logged_;
};

}  // namespace kvtier::internal
