// Orders that a library ThreadSanitizer cannot see establishes, told to it.
//
// gRPC is not built with TSan: when it runs a reactor's callback on its thread after the reactor's
// last call into it on another (StartRead, StartWrite, Finish, then OnReadDone, OnWriteDone,
// OnDone), the order comes from its completion queue's own atomics, which TSan does not see, so
// every field of the reactor would look raced. A HappensBefore(token) on one thread and a
// HappensAfter(token) on another that a library orders after it state that order. They are
// no-ops in every other build.
//
// Use them only for an order the library documents, right at the calls into it and at the top of
// its callbacks; never to quiet a report in Baton's own synchronisation.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace baton {

inline void HappensBefore([[maybe_unused]] const void* token) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(token));
#endif
}

inline void HappensAfter([[maybe_unused]] const void* token) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(token));
#endif
}

}  // namespace baton
