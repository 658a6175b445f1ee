// Truncated SVD through LAPACK's dgesdd (see low_rank.h), from OpenBLAS, which carries
// LAPACK (the GEMMs are oneDNN's, gemm.h).
#include "kernels/low_rank.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

extern "C" void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda,
                        double* s, double* u, const int* ldu, double* vt, const int* ldvt,
                        double* work, const int* lwork, int* iwork, int* info);

namespace baton {

LowRankFactors FactorLowRank(const float* w, int64_t in, int64_t out, int64_t rank) {
  const int64_t k = std::min(in, out);
  BATON_CHECK(in > 0 && out > 0 && rank >= 1 && rank <= k,
              "a rank-{} factorisation of a ({}, {}) matrix: the rank must be in [1, {}]", rank, in,
              out, k);
  BATON_CHECK(in * out < (int64_t{1} << 31), "a ({}, {}) matrix is too large for LAPACK's int", in,
              out);
  const int m = static_cast<int>(in), n = static_cast<int>(out), kk = static_cast<int>(k);
  // Column-major copy: a[i + j*m] = w[i][j].
  std::vector<double> a(static_cast<size_t>(in * out));
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t j = 0; j < out; ++j) a[static_cast<size_t>(i + j * in)] = w[i * out + j];
  }
  std::vector<double> s(static_cast<size_t>(k)), left(static_cast<size_t>(in * k)),
      right(static_cast<size_t>(k * out));
  std::vector<int> iwork(static_cast<size_t>(8 * k));
  const char jobz = 'S';
  int info = 0;
  int lwork = -1;
  double query = 0;
  dgesdd_(&jobz, &m, &n, a.data(), &m, s.data(), left.data(), &m, right.data(), &kk, &query, &lwork,
          iwork.data(), &info);
  BATON_CHECK(info == 0, "LAPACK dgesdd workspace query failed (info {})", info);
  lwork = static_cast<int>(query);
  std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
  dgesdd_(&jobz, &m, &n, a.data(), &m, s.data(), left.data(), &m, right.data(), &kk, work.data(),
          &lwork, iwork.data(), &info);
  BATON_CHECK(info == 0, "LAPACK dgesdd did not converge on a ({}, {}) matrix (info {})", in, out,
              info);
  LowRankFactors f;
  f.u.resize(static_cast<size_t>(in * rank));
  f.v.resize(static_cast<size_t>(rank * out));
  for (int64_t l = 0; l < rank; ++l) {
    const double root = std::sqrt(s[static_cast<size_t>(l)]);
    for (int64_t i = 0; i < in; ++i) {
      f.u[static_cast<size_t>(i * rank + l)] =
          static_cast<float>(left[static_cast<size_t>(i + l * in)] * root);
    }
    for (int64_t j = 0; j < out; ++j) {
      f.v[static_cast<size_t>(l * out + j)] =
          static_cast<float>(right[static_cast<size_t>(l + j * k)] * root);
    }
  }
  f.singular_values = std::move(s);
  return f;
}

}  // namespace baton
