#include "job/fault_hooks.h"

#include <utility>

namespace baton {
namespace {

FaultHooks& Hooks() {
  static FaultHooks hooks;
  return hooks;
}

}  // namespace

void SetFaultHooks(FaultHooks hooks) { Hooks() = std::move(hooks); }

const FaultHooks& GetFaultHooks() { return Hooks(); }

}  // namespace baton
