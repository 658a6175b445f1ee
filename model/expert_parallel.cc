// Expert parallelism's gradient fold (see expert_parallel.h).
#include "model/expert_parallel.h"

#include "core/error.h"

namespace baton {

void FoldExpertGradSources(Backend& backend, const std::vector<ExpertGradSources>& sources) {
  for (const ExpertGradSources& s : sources) {
    Tensor& grad = s.param->grad;
    BATON_CHECK(s.others.defined() && s.others.dim() == grad.dim() + 1 &&
                    s.others.numel() % grad.numel() == 0,
                "{}: accumulators {} do not match its gradient {}", s.param->name,
                s.others.ToString(), grad.ToString());
    for (int64_t source = 0; source < s.others.size(0); ++source) {
      backend.Accumulate(s.others.Slice(0, source, source + 1).View(grad.shape()), grad);
    }
    Tensor others = s.others;
    backend.Zero(others);
  }
}

}  // namespace baton
