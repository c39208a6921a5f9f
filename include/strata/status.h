#pragma once
// Status and Result<T>: expected, recoverable failures returned as values (out of blocks, an
// unsupported kernel configuration, a request that cannot be served). Both are [[nodiscard]].
// Part of the public API (every fallible Engine call returns one); the engine's own code shares
// them (src/core/status.h adds its propagation macro).

#include <string>
#include <utility>
#include <variant>

namespace strata {

namespace detail {
// Misuse of a Result (value() on an error, an error made from an OK status): prints what and
// aborts. A programmer error, never a way to report bad input.
[[noreturn]] void result_misuse(const char* what);
}  // namespace detail

enum class StatusCode {
  kOk,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kResourceExhausted,
  kUnsupported,
  kInternal,
  kUnavailable,  // the service cannot take it now (shutting down, queue full): retry later
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) detail::result_misuse("Result constructed from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    if (!ok()) detail::result_misuse("Result::value() on an error");
    return std::get<T>(v_);
  }
  const T& value() const& {
    if (!ok()) detail::result_misuse("Result::value() on an error");
    return std::get<T>(v_);
  }
  T&& value() && {
    if (!ok()) detail::result_misuse("Result::value() on an error");
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace strata
