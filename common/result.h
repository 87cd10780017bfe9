// Result<T>: an expected value or an Error a user can act on. Expected failures travel as values; exceptions
// stop at the boundaries (HTTP handler, hook main, C ABI functions).
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace gpuckpt {

struct Error {
  std::string message;  // says what failed, on which input, and what to do
  int errno_value = EINVAL;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}                 // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}             // NOLINT(google-explicit-constructor)

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

inline Error make_error(std::string message, int errno_value = EINVAL) {
  return Error{std::move(message), errno_value};
}

}  // namespace gpuckpt
