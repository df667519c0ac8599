// Proves the error model: errno values map to the documented codes in one
// place, Status formatting carries code, message and errno, Result holds a
// value or an error (never an OK status without a value), and the two macros
// propagate errors.
#include <gtest/gtest.h>

#include <cerrno>

#include "kvtier/big_int.h"
#include "kvtier/result.h"
#include "kvtier/status.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

TEST(Status, ErrnoMapping) {
  const std::pair<int, StatusCode> cases[] = {
      {ENOENT, StatusCode::kNotFound},      {ENOSPC, StatusCode::kNoSpace},
      {EDQUOT, StatusCode::kNoSpace},       {EACCES, StatusCode::kPermissionDenied},
      {EPERM, StatusCode::kPermissionDenied}, {EROFS, StatusCode::kPermissionDenied},
      {EAGAIN, StatusCode::kBusy},          {ETIMEDOUT, StatusCode::kTimedOut},
      {ECANCELED, StatusCode::kTimedOut},   {EINVAL, StatusCode::kInvalidArgument},
      {ENOSYS, StatusCode::kUnavailable},   {EIO, StatusCode::kIoError},
      {EBADMSG, StatusCode::kCorruption},  // a CRC mismatch, as vLLM's OSError(EBADMSG)
      {0, StatusCode::kInternal}};
  for (const auto& [err, code] : cases) {
    Status s = ErrnoToStatus(err, "open /x");
    EXPECT_EQ(s.code(), code) << err;
    EXPECT_EQ(s.sys_errno(), err);
  }
}

TEST(Status, ToStringNamesCodeMessageAndErrno) {
  EXPECT_EQ(Status().ToString(), "ok");
  std::string text = ErrnoToStatus(ENOSPC, "write /r/a.bin").ToString();
  EXPECT_NE(text.find("no_space: write /r/a.bin"), std::string::npos) << text;
  EXPECT_NE(text.find("errno 28"), std::string::npos) << text;
  EXPECT_EQ(InvalidArgument("x").WithContext("config").message(), "config: x");
}

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument("odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  KVTIER_ASSIGN_OR_RETURN(int half, Half(v));
  KVTIER_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int v) {
  KVTIER_RETURN_IF_ERROR(Half(v).status());
  return Status::Ok();
}

TEST(Result, ValueOrErrorAndMacros) {
  ASSERT_OK_AND_ASSIGN(int q, Quarter(8));
  EXPECT_EQ(q, 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(3).message(), "odd");
  EXPECT_EQ(Half(3).value_or(-1), -1);
}

TEST(Result, OkStatusWithoutValueBecomesInternal) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(BigInt, DecimalRoundTripAndInt64Bounds) {
  for (const char* text : {"0", "1", "-1", "255", "256", "9223372036854775807", "-9223372036854775808",
                           "9223372036854775808", "-9223372036854775809", "340282366920938463463374607431768211456"}) {
    ASSERT_OK_AND_ASSIGN(BigInt v, BigInt::FromDecimal(text));
    EXPECT_EQ(v.ToDecimal(), text);
  }
  EXPECT_EQ(BigInt::FromDecimal("9223372036854775807").value().ToInt64(), INT64_MAX);
  EXPECT_EQ(BigInt::FromDecimal("-9223372036854775808").value().ToInt64(), INT64_MIN);
  EXPECT_FALSE(BigInt::FromDecimal("9223372036854775808").value().ToInt64().has_value());
  EXPECT_EQ(BigInt::FromDecimal("-0").value(), BigInt(0));
  for (const char* bad : {"", "-", "+1", "1.0", " 1", "1e3", "0x10"}) {
    EXPECT_FALSE(BigInt::FromDecimal(bad).ok()) << bad;
  }
  EXPECT_EQ(BigInt(INT64_MIN).ToDecimal(), "-9223372036854775808");
}

}  // namespace
}  // namespace kvtier
