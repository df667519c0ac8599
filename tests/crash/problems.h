// Problems: collects the violations of one crash check; the first few become
// test failures, the rest only a count, so a broken build does not print
// thousands of lines. Shared by the SIGKILL and the power-loss crash tests.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace kvtier::testing {

class Problems {
 public:
  ~Problems() {
    if (count_ > kShown) ADD_FAILURE() << (count_ - kShown) << " more violations like the above";
  }
  void Add(const std::string& message) {
    if (++count_ <= kShown) ADD_FAILURE() << message;
  }
  // Streams one message: problems->Report() << "text" << value;
  struct Line {
    Problems* owner;
    std::ostringstream text;
    ~Line() { owner->Add(text.str()); }
    template <class T>
    Line& operator<<(const T& v) {
      text << v;
      return *this;
    }
  };
  Line Report() { return Line{this, {}}; }

 private:
  static constexpr int kShown = 12;
  int count_ = 0;
};

}  // namespace kvtier::testing
