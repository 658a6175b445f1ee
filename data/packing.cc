// Packed documents: the segment layout of a row (see packing.h).
#include "data/packing.h"

namespace baton {

int64_t PackRows(const int32_t* tokens, int rows, int seq, int32_t separator,
                 int32_t ignored_target, int32_t* segment_starts, int32_t* targets) {
  int64_t counted = 0;
  for (int r = 0; r < rows; ++r) {
    const int64_t row = static_cast<int64_t>(r) * seq;
    int32_t start = 0;
    for (int t = 0; t < seq; ++t) {
      if (t > 0 && tokens[row + t - 1] == separator) start = t;
      segment_starts[row + t] = start;
      if (tokens[row + t] == separator) targets[row + t] = ignored_target;
      if (targets[row + t] != ignored_target) ++counted;
    }
  }
  return counted;
}

}  // namespace baton
