// FunctionRef<R(Args...)>: a non-owning reference to a callable, for passing a lambda down one
// call without std::function's copy or heap allocation (as LLVM's function_ref, C++26's
// std::function_ref). It holds a pointer to the callable: the callable must outlive every call,
// so take one as a parameter and call it before returning; never store one.
#pragma once

#include <type_traits>
#include <utility>

namespace baton {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                        std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& callable)  // NOLINT(google-explicit-constructor): a lambda converts implicitly
      : callable_(const_cast<void*>(static_cast<const void*>(&callable))),
        call_([](void* callable, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(callable))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(callable_, std::forward<Args>(args)...); }

 private:
  void* callable_;
  R (*call_)(void*, Args...);
};

}  // namespace baton
