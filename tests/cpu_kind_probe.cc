// Prints the vector features Baton's CPU code dispatches on, as this process sees them
// (`avx2=1 fma=1 avx512f=0 avx512bw=0 avx512_bf16=0`): scripts/avx2-emulation.sh runs it under
// an emulated CPU to check that the emulation hides AVX-512 before trusting the tests it runs.
#include <cstdio>

int main() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  std::printf("avx2=%d fma=%d avx512f=%d avx512bw=%d avx512_bf16=%d\n",
              __builtin_cpu_supports("avx2") ? 1 : 0, __builtin_cpu_supports("fma") ? 1 : 0,
              __builtin_cpu_supports("avx512f") ? 1 : 0, __builtin_cpu_supports("avx512bw") ? 1 : 0,
              __builtin_cpu_supports("avx512bf16") ? 1 : 0);
  return 0;
#else
  std::printf("not x86-64\n");
  return 1;
#endif
}
