// Early return on an error absl::Status / absl::StatusOr, so the happy path reads straight down.
//
// Contract:
// - CUVIL_RETURN_IF_ERROR(expr): `expr` is an absl::Status or an absl::StatusOr<T>, evaluated
//   exactly once. When it is not OK, the enclosing function returns that status unchanged (code
//   and message); the enclosing function must return absl::Status or absl::StatusOr<U>. Usable as
//   a single statement (it expands to one `do { } while (0)`), e.g. in a braceless `if`.
// - CUVIL_ASSIGN_OR_RETURN(lhs, expr): `expr` is an absl::StatusOr<T>, evaluated exactly once.
//   When it is not OK the enclosing function returns its status; otherwise its value is moved
//   into `lhs`, which is either a declaration (`auto x`, `std::string s`) or an existing lvalue
//   (`*out`, `model.weights`). It expands to several statements: not usable as the body of a
//   braceless `if`/`else`/loop, and a declaration in `lhs` is in scope for the rest of the block.
//   An `lhs` or `expr` with a top-level comma must be wrapped in parentheses for `expr` or use a
//   type alias for `lhs` (the macro has exactly two arguments).
// Neither macro adds context to the message: when a caller has something to say, it should wrap
// the status by hand. Header-only; no exceptions involved.
#ifndef CUVIL_RUNTIME_STATUS_MACROS_H_
#define CUVIL_RUNTIME_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cuvil::status_macros_internal {

inline const absl::Status& AsStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace cuvil::status_macros_internal

#define CUVIL_RETURN_IF_ERROR(expr)                            \
  do {                                                         \
    if (::absl::Status cuvil_status_macro_status_ =            \
            ::cuvil::status_macros_internal::AsStatus((expr)); \
        !cuvil_status_macro_status_.ok()) {                    \
      return cuvil_status_macro_status_;                       \
    }                                                          \
  } while (false)

#define CUVIL_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define CUVIL_STATUS_MACROS_CONCAT_(a, b) CUVIL_STATUS_MACROS_CONCAT_INNER_(a, b)

#define CUVIL_ASSIGN_OR_RETURN(lhs, expr)                                                       \
  CUVIL_ASSIGN_OR_RETURN_IMPL_(CUVIL_STATUS_MACROS_CONCAT_(cuvil_status_or_, __COUNTER__), lhs, \
                               expr)

#define CUVIL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = *std::move(tmp)

#endif  // CUVIL_RUNTIME_STATUS_MACROS_H_
