#include "plan/result.h"

#include "core/error.h"

namespace baton {

std::string TraceSpan::Name(int num_stages, ChunkLayout layout) const {
  switch (kind) {
    case Kind::kCompute:
      return ToString(action, num_stages, layout);
    case Kind::kWait:
      return "wait " + ToString(action, num_stages, layout);
    case Kind::kOptimizer:
      return "optimizer";
    case Kind::kStepStart:
      return "step start";
    case Kind::kExchange:
      return "exchange";
  }
  BATON_FAIL("unknown trace span kind {}", static_cast<int>(kind));
}

}  // namespace baton
