// kvtier's log (kvtier/log.h) for Python: set_log_sink installs a callable
// that receives (level, message) strings; set_min_log_level filters.
//
// The callable runs on whichever thread kvtier logs from, kvtier's own
// threads included: every call and the callable's final release take the GIL
// themselves. SetLogSink waits for running calls of the previous sink, so the
// binding calls it with the GIL released (a running call may be waiting for
// the GIL). At interpreter exit the sink is reset to stderr (atexit), before
// the GIL can no longer be taken.
#include <cstdio>
#include <memory>
#include <string>

#include "kvtier/log.h"
#include "py_common.h"

namespace kvtier::py {
namespace {

using HeldCallable = std::shared_ptr<pb::object>;

// Owns a reference to the callable; drops it with the GIL, from any thread.
HeldCallable Hold(pb::object callable) {
  return HeldCallable(new pb::object(std::move(callable)), [](pb::object* o) {
    if (_Py_IsFinalizing()) {
      o->release();  // too late to take the GIL: leak the reference
      delete o;
    } else {
      pb::gil_scoped_acquire gil;
      delete o;
    }
  });
}

void CallPython(const pb::object& callable, LogLevel level, std::string_view message) {
  if (_Py_IsFinalizing()) {  // a kvtier thread logging while Python shuts down
    std::fputs(("kvtier: " + std::string(LogLevelName(level)) + ": " + std::string(message) + "\n").c_str(), stderr);
    return;
  }
  pb::gil_scoped_acquire gil;
  try {
    // Paths in messages may be any bytes: surrogateescape, as os.fsdecode.
    pb::str text = pb::reinterpret_steal<pb::str>(
        PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "surrogateescape"));
    if (!text) throw pb::error_already_set();
    callable(pb::str(std::string(LogLevelName(level))), text);
  } catch (pb::error_already_set& e) {
    e.discard_as_unraisable("kvtier log sink");  // reported by sys.unraisablehook
  }
}

void SetPythonLogSink(const pb::object& callable) {
  LogSink sink;
  if (!callable.is_none()) {
    if (!PyCallable_Check(callable.ptr())) ThrowStatus(InvalidArgument("set_log_sink: not callable"));
    sink = [held = Hold(callable)](LogLevel level, std::string_view message) { CallPython(*held, level, message); };
  }
  pb::gil_scoped_release release;
  SetLogSink(std::move(sink));
}

LogLevel ParseLevel(const std::string& name) {
  for (LogLevel level : {LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (LogLevelName(level) == name) return level;
  }
  ThrowStatus(InvalidArgument("log level '" + name + "': expected info, warning or error"));
}

}  // namespace

void BindLog(pb::module_& m) {
  m.def("set_log_sink", &SetPythonLogSink, pb::arg("sink"),
        "Sends kvtier's log messages to sink(level, message) (level: 'info', 'warning', 'error'), "
        "called from any thread, kvtier's own included; None restores stderr.");
  m.def("set_min_log_level", [](const std::string& level) { SetMinLogLevel(ParseLevel(level)); }, pb::arg("level"),
        "Drops kvtier log messages below `level` ('info', 'warning' or 'error'; default 'info').");
  pb::module_::import("atexit").attr("register")(pb::cpp_function([] {
    pb::gil_scoped_release release;
    SetLogSink(nullptr);
  }));
}

}  // namespace kvtier::py
