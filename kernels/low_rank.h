// Truncated SVD factorisation of a weight matrix (baton compress --low-rank, docs/memory.md):
// W (in, out) ~= U (in, r) V (r, out), the best rank-r approximation in the Frobenius norm
// (Eckart-Young). With W = A S B^T (LAPACK dgesdd, in double), U = A_r sqrt(S_r) and
// V = sqrt(S_r) B_r^T: the singular values split evenly between the factors, so both are of the
// same scale. r may be up to min(in, out); at that rank U V = W to rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace baton {

struct LowRankFactors {
  std::vector<float> u;                 // (in, rank), row-major
  std::vector<float> v;                 // (rank, out), row-major
  std::vector<double> singular_values;  // all min(in, out) of them, descending
};

// `w` row-major (in, out). Throws baton::Error for a rank outside [1, min(in, out)] or when
// LAPACK fails to converge.
LowRankFactors FactorLowRank(const float* w, int64_t in, int64_t out, int64_t rank);

}  // namespace baton
