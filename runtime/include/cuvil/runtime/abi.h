// The runtime entry points generated code calls, as data: one description per function of
// abi.def (name, whether AOT libraries provide it, return and parameter types), and a
// compile-time check that a C declaration has the declared types. Immutable; thread-safe.
#ifndef CUVIL_RUNTIME_ABI_H_
#define CUVIL_RUNTIME_ABI_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <type_traits>

namespace cuvil::abi {

// The parameter and return types of the ABI (abi.def's type letters).
enum Type : uint8_t { V, P, I32, I64, F32 };

// One entry point.
struct Function {
  const char* name;
  bool in_aot;  // an AOT library's runtime defines it
  Type ret;
  Type params[16];
  int num_params;
};

// The entry points by name: abi::Fn::cuvil_uk_conv2d.
enum class Fn : int {
#define CUVIL_ABI(name, ...) name,
#include "cuvil/runtime/abi.def"
#undef CUVIL_ABI
};

// The description of `fn`.
const Function& Describe(Fn fn);
// Every entry point, in abi.def's order.
std::span<const Function> All();
// The entry point called `name`, or null.
const Function* Find(std::string_view name);

// The ABI type of C++ type T (V for anything outside the ABI's vocabulary but void is refused by
// Matches).
template <typename T>
constexpr Type TypeOf() {
  if constexpr (std::is_void_v<T>) {
    return V;
  } else if constexpr (std::is_pointer_v<T>) {
    return P;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return I32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return I64;
  } else if constexpr (std::is_same_v<T, float>) {
    return F32;
  } else {
    return static_cast<Type>(255);  // matches nothing
  }
}

// Whether function `f` returns `ret` and takes exactly `params`.
template <typename R, typename... A>
constexpr bool Matches(R (*)(A...), Type ret, std::initializer_list<Type> params) {
  constexpr Type actual[] = {TypeOf<A>()..., V};
  if (TypeOf<R>() != ret || params.size() != sizeof...(A)) return false;
  size_t i = 0;
  for (Type t : params) {
    if (actual[i++] != t) return false;
  }
  return true;
}

}  // namespace cuvil::abi

#endif  // CUVIL_RUNTIME_ABI_H_
