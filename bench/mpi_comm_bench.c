/* mpi_comm_bench: Open MPI's all-reduce and send/recv between the ranks of one host, the
 * alternatives weighed against Baton's own shared-memory links (docs/parallel.md, "Ranks on one
 * host"; bench/comm_alternatives.sh builds and runs it under each Open MPI transport; not part of
 * the build). Prints nccl-tests' bus bandwidth per size (KiB), as comm_bench does; checks every
 * all-reduce result (small integers: exact in any order). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double Now(void) { return MPI_Wtime(); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const long sizes[] = {4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  int failed = 0;
  if (rank == 0) printf("%-8s %14s %14s\n", "KiB", "allreduce GB/s", "sendrecv GB/s");
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
    const long count = sizes[s] / 4;
    float* in = malloc(sizes[s]);
    float* out = malloc(sizes[s]);
    for (long i = 0; i < count; ++i) in[i] = (float)(rank + 1 + i % 7);
    const int iterations = sizes[s] >= (16 << 20) ? 5 : 20;
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (long i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += (float)(r + 1 + i % 7);
      if (out[i] != sum) failed = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double begin = Now();
    for (int i = 0; i < iterations; ++i) {
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    const double allreduce = (Now() - begin) / iterations;
    MPI_Barrier(MPI_COMM_WORLD);
    begin = Now();
    for (int i = 0; i < iterations; ++i) {
      MPI_Sendrecv(in, (int)count, MPI_FLOAT, (rank + 1) % n, 0, out, (int)count, MPI_FLOAT,
                   (rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    const double sendrecv = (Now() - begin) / iterations;
    if (rank == 0) {
      printf("%-8ld %14.3f %14.3f\n", sizes[s] >> 10,
             sizes[s] * 2.0 * (n - 1) / n / allreduce / 1e9, sizes[s] / sendrecv / 1e9);
    }
    free(in);
    free(out);
  }
  if (rank == 0) printf("%s\n", failed ? "CHECKS FAILED" : "checks passed");
  MPI_Finalize();
  return failed;
}
