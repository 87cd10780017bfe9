// Result<T>: an expected value or an Error a user can act on. Expected failures travel as values; exceptions
// stop at the boundaries (HTTP handler, hook main, C ABI functions).
//
// Propagating: an error that travels up should say, at each level that knows it, what was being done and with
// which input ("importing checkpoint /var/x.tar: reading spec.dump: no such file"), the way Go's
// fmt.Errorf("...: %w") and Abseil's RETURN_IF_ERROR do. Use the macros at the end of this file instead of
// writing `if (!x) return x.error();`:
//   GPUCKPT_TRY(auto spec, read_spec(path), "reading OCI spec " + path.string());
//   GPUCKPT_TRY_VOID(write_file(path, bytes));   // the callee already names the path: add nothing
// Add context only where the message would otherwise lack the step or the input; where the callee already says
// it, propagate without words, so that messages get better, not longer.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpuckpt {

struct Error {
  std::string message;  // says what failed, on which input, and what to do
  int errno_value = EINVAL;

  // This error as seen one level up: "what: message", errno kept (it decides HTTP codes and the -errno of the
  // C ABI). An empty `what`, or one the message already starts with, adds nothing, so a caller naming the same
  // step as its callee does not repeat it.
  Error with_context(std::string_view what) const& { return Error(*this).with_context(what); }
  Error with_context(std::string_view what) && {
    if (what.empty() || (message.starts_with(what) && std::string_view(message).substr(what.size()).starts_with(": ")))
      return std::move(*this);
    message.insert(0, std::string(what) + ": ");
    return std::move(*this);
  }
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
  const Error& error() const& { return std::get<1>(state_); }
  Error&& error() && { return std::get<1>(std::move(state_)); }

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
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

inline Error make_error(std::string message, int errno_value = EINVAL) {
  return Error{std::move(message), errno_value};
}

}  // namespace gpuckpt

// GPUCKPT_TRY(decl, expr[, context]): evaluates `expr` (a Result<T>) once; on failure returns its error from
// the enclosing function (which returns some Result<U>), prefixed with `context` when given; on success moves
// the value into `decl` (`auto x`, `const auto& x`, or an existing variable). `context` is anything a
// std::string_view can be made from and is evaluated only on failure. The macro expands to several
// statements: write it as a statement of its own (not as the body of an unbraced if), at most one per line.
#define GPUCKPT_TRY(decl, expr, ...) GPUCKPT_TRY_IMPL_(GPUCKPT_TRY_NAME_(__LINE__), decl, expr, __VA_ARGS__)

// GPUCKPT_TRY_VOID(expr[, context]): the same for a Result whose value is not needed (Result<void>, or a named
// Result checked late, e.g. after a cleanup that must run either way; it is not copied). One statement.
#define GPUCKPT_TRY_VOID(expr, ...)                                                               \
  do {                                                                                            \
    if (auto&& gpuckpt_try_void_ = (expr); !gpuckpt_try_void_)                                    \
      return std::move(gpuckpt_try_void_).error().with_context(GPUCKPT_TRY_WHAT_(__VA_ARGS__));  \
  } while (false)

#define GPUCKPT_TRY_IMPL_(tmp, decl, expr, ...)                                                   \
  auto tmp = (expr);                                                                              \
  if (!tmp) return std::move(tmp).error().with_context(GPUCKPT_TRY_WHAT_(__VA_ARGS__));           \
  decl = std::move(tmp).value()
#define GPUCKPT_TRY_WHAT_(...) std::string_view(__VA_ARGS__)
#define GPUCKPT_TRY_NAME_(line) GPUCKPT_TRY_CONCAT_(gpuckpt_try_, line)
#define GPUCKPT_TRY_CONCAT_(a, b) a##b
