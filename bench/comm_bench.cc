// comm_bench: Baton's collectives at each message size, in the manner of nccl-tests
// (bench/README.md, "comm_bench"). N ranks as threads of this process, each with its own
// communicator, meeting through an in-memory key-value store; for each transport ranks on one
// host may use: "shm" (GlooCommunicator's shared-memory links, the default) and "tcp" (Gloo
// over TCP loopback, as with BATON_SHARED_MEMORY=0), with shm's all-reduce speed-up over TCP
// per size at the end. Per collective and size: the time of one call (the mean
// of the timed iterations after a warm-up), the algorithm bandwidth (bytes / time) and the bus
// bandwidth (nccl-tests' definition: the bytes each rank's link carries, comparable across rank
// counts), beside the same run's memcpy bandwidth, the limit for ranks that share a host's
// memory. Every result is checked (exact integer-valued f32 sums, every moved byte) before its
// figure is printed; a wrong one exits 1.
//
// With --rank R the process is rank R alone of --ranks processes, which meet through files in
// --store DIR and listen on --listen ADDRESS: ranks in separate processes, or in separate network
// namespaces joined by a veth pair as the multi-node test builds them (bench/comm_netns.sh). Rank
// 0 prints the tables; every rank checks its results and exits 1 on a wrong one.
//
//   comm_bench [--ranks 2] [--min-bytes 4096] [--max-bytes 268435456] [--collectives all]
//              [--iterations 20] [--transport both|shm|tcp]
//              [--rank R --store DIR [--listen 127.0.0.1]]
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "comm/gloo_communicator.h"
#include "comm/group.h"
#include "comm/kv_store.h"
#include "core/error.h"
#include "core/memory.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
constexpr CommTimeout kTimeout{std::chrono::minutes(5)};  // a safety limit only

// One collective: what it moves and how each rank checks what it got.
struct Collective {
  std::string name;
  // nccl-tests' bus bandwidth factor for n ranks: the share of the message each rank's link
  // carries (all-reduce 2(n-1)/n, gather and scatter kinds (n-1)/n, send/recv 1).
  double (*bus_factor)(int n);
  // Fills rank r's input for a message of `count` f32 (the whole tensor of the collective).
  void (*fill)(std::vector<float>& buffer, int rank, int n);
  // Runs it once on `group` over `buffer` (and `out` where it has an output apart).
  void (*run)(Group& group, std::vector<float>& buffer, std::vector<float>& out);
  // True when rank r's result is right, given the inputs `fill` wrote.
  bool (*check)(const std::vector<float>& buffer, const std::vector<float>& out, int rank, int n);
};

// Small integers, so that every sum is exact in f32 whatever the order: element i of rank r.
float Value(int64_t i, int rank) { return static_cast<float>(rank + 1 + i % 7); }

Tensor Wrap(std::vector<float>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32);
}

const std::vector<Collective>& Collectives() {
  static const std::vector<Collective> all = {
      {"all_reduce", [](int n) { return 2.0 * (n - 1) / n; },
       [](std::vector<float>& b, int r, int) {
         for (size_t i = 0; i < b.size(); ++i) b[i] = Value(static_cast<int64_t>(i), r);
       },
       [](Group& g, std::vector<float>& b, std::vector<float>&) {
         Tensor t = Wrap(b);
         g.AllReduceSum(t, kTimeout);
       },
       [](const std::vector<float>& b, const std::vector<float>&, int, int n) {
         for (size_t i = 0; i < b.size(); ++i) {
           float sum = 0;
           for (int r = 0; r < n; ++r) sum += Value(static_cast<int64_t>(i), r);
           if (b[i] != sum) return false;
         }
         return true;
       }},
      {"reduce_scatter", [](int n) { return (n - 1.0) / n; },
       [](std::vector<float>& b, int r, int) {
         for (size_t i = 0; i < b.size(); ++i) b[i] = Value(static_cast<int64_t>(i), r);
       },
       [](Group& g, std::vector<float>& b, std::vector<float>&) {
         Tensor t = Wrap(b);
         g.ReduceScatterSum(t, kTimeout);
       },
       [](const std::vector<float>& b, const std::vector<float>&, int rank, int n) {
         const size_t slice = b.size() / static_cast<size_t>(n);
         const size_t first = static_cast<size_t>(rank) * slice;
         for (size_t i = first; i < first + slice; ++i) {
           float sum = 0;
           for (int r = 0; r < n; ++r) sum += Value(static_cast<int64_t>(i), r);
           if (b[i] != sum) return false;
         }
         return true;
       }},
      {"all_gather", [](int n) { return (n - 1.0) / n; },
       [](std::vector<float>& b, int r, int n) {
         const size_t slice = b.size() / static_cast<size_t>(n);
         std::fill(b.begin(), b.end(), -1.0f);
         const size_t first = static_cast<size_t>(r) * slice;
         for (size_t i = first; i < first + slice; ++i) {
           b[i] = Value(static_cast<int64_t>(i), r);
         }
       },
       [](Group& g, std::vector<float>& b, std::vector<float>&) {
         Tensor t = Wrap(b);
         g.AllGather(t, kTimeout);
       },
       [](const std::vector<float>& b, const std::vector<float>&, int, int n) {
         const size_t slice = b.size() / static_cast<size_t>(n);
         for (size_t i = 0; i < b.size(); ++i) {
           if (b[i] != Value(static_cast<int64_t>(i), static_cast<int>(i / slice))) return false;
         }
         return true;
       }},
      {"all_to_all", [](int n) { return (n - 1.0) / n; },
       [](std::vector<float>& b, int r, int) {
         for (size_t i = 0; i < b.size(); ++i) b[i] = Value(static_cast<int64_t>(i), r);
       },
       [](Group& g, std::vector<float>& b, std::vector<float>& out) {
         const Tensor send = Wrap(b);
         Tensor recv = Wrap(out);
         g.AllToAll(send, recv, kTimeout);
       },
       // Slice j of rank r's output is slice r of rank j's input.
       [](const std::vector<float>& b, const std::vector<float>& out, int rank, int n) {
         const size_t slice = b.size() / static_cast<size_t>(n);
         for (size_t i = 0; i < out.size(); ++i) {
           const int from = static_cast<int>(i / slice);
           const size_t at = static_cast<size_t>(rank) * slice + i % slice;
           if (out[i] != Value(static_cast<int64_t>(at), from)) return false;
         }
         return true;
       }},
      // Each rank sends its whole message to the next and receives the previous one's (a ring
      // step: every link busy in both directions, as a pipeline's exchange).
      {"send_recv", [](int) { return 1.0; },
       [](std::vector<float>& b, int r, int) {
         for (size_t i = 0; i < b.size(); ++i) b[i] = Value(static_cast<int64_t>(i), r);
       },
       [](Group& g, std::vector<float>& b, std::vector<float>& out) {
         const int n = g.size(), r = g.rank();
         Tensor recv = Wrap(out);
         std::unique_ptr<Work> in = g.Irecv(recv, (r + n - 1) % n);
         std::unique_ptr<Work> sent = g.Isend(Wrap(b), (r + 1) % n);
         in->Wait(kTimeout);
         sent->Wait(kTimeout);
       },
       [](const std::vector<float>&, const std::vector<float>& out, int rank, int n) {
         const int from = (rank + n - 1) % n;
         for (size_t i = 0; i < out.size(); ++i) {
           if (out[i] != Value(static_cast<int64_t>(i), from)) return false;
         }
         return true;
       }},
  };
  return all;
}

// Bytes per second of memcpy over `bytes`, this machine's single-core memory bandwidth (the
// fastest of a few copies).
double MemcpyBandwidth(int64_t bytes) {
  std::vector<char> from(static_cast<size_t>(bytes), 1), to(static_cast<size_t>(bytes), 0);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point begin = Clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    best = std::max(best, static_cast<double>(bytes) / seconds);
  }
  BATON_CHECK(to.back() == 1, "memcpy did not copy");
  return best;
}

// Rendezvous through files in a directory both processes see: a key's value is written to a
// temporary name and renamed into place, so a reader sees it whole or not at all.
class FileKvStore final : public KvStore {
 public:
  explicit FileKvStore(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
  }
  void Set(const std::string& key, const std::string& value) override {
    const std::string path = PathOf(key);
    const std::string temporary = fmt::format("{}.tmp.{}", path, getpid());
    {
      std::ofstream out(temporary, std::ios::binary);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      BATON_CHECK(out.good(), "{}: cannot write", temporary);
    }
    std::filesystem::rename(temporary, path);
  }
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override {
    const std::string path = PathOf(key);
    const Clock::time_point deadline = Clock::now() + timeout;
    while (!std::filesystem::exists(path)) {
      BATON_CHECK(Clock::now() < deadline, "key {} ({}) was not set within {} ms", key, path,
                  timeout.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream value;
    value << in.rdbuf();
    return value.str();
  }
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const std::string& key : keys) Get(key, timeout);
  }

 private:
  std::string PathOf(std::string key) const {
    std::replace(key.begin(), key.end(), '/', '~');
    return dir_ + "/" + key;
  }
  std::string dir_;
};

struct Options {
  int ranks = 2;
  int rank = -1;      // >= 0: this process is that rank alone (--store, --listen)
  std::string store;  // the rendezvous directory of a process rank
  std::string listen = "127.0.0.1";
  int64_t min_bytes = 4096;
  int64_t max_bytes = int64_t{256} << 20;
  std::string collectives = "all";
  int iterations = 20;
  std::string transport = "both";
};

// "4 KiB", "256 MiB".
std::string Size(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} KiB", bytes >> 10);
}

// Times every chosen collective at every size over one transport; checks each result.
// seconds[c][s]: one call's mean time; right[c][s]: its check.
void Measure(const Options& options, bool shared_memory,
             const std::vector<const Collective*>& chosen, const std::vector<int64_t>& sizes,
             std::vector<std::vector<double>>& seconds, std::vector<std::vector<bool>>& right) {
  const int n = options.ranks;
  seconds.assign(chosen.size(), std::vector<double>(sizes.size()));
  right.assign(chosen.size(), std::vector<bool>(sizes.size(), true));
  MemoryKvStore memory_store;
  std::unique_ptr<FileKvStore> file_store;
  if (options.rank >= 0) file_store = std::make_unique<FileKvStore>(options.store);
  KvStore& store = file_store ? static_cast<KvStore&>(*file_store) : memory_store;
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    if (options.rank >= 0 && rank != options.rank) continue;
    threads.emplace_back([&, rank] {
      try {
        GlooOptions gloo;
        gloo.rank = rank;
        gloo.size = n;
        gloo.timeout = kTimeout;
        gloo.shared_memory = shared_memory;
        gloo.hostname = options.listen;
        gloo.store_prefix = shared_memory ? "gloo-shm" : "gloo-tcp";
        GlooCommunicator world(store, allocator, gloo);
        std::vector<int> members(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) members[static_cast<size_t>(r)] = r;
        Group group(world, members);
        for (size_t c = 0; c < chosen.size(); ++c) {
          for (size_t s = 0; s < sizes.size(); ++s) {
            std::vector<float> buffer(static_cast<size_t>(sizes[s] / 4)), out(buffer.size());
            // Fewer iterations for large messages: about 256 MiB moved per figure at least once.
            const int iterations = static_cast<int>(
                std::clamp<int64_t>((int64_t{256} << 20) / sizes[s], 2, options.iterations));
            chosen[c]->fill(buffer, rank, n);
            chosen[c]->run(group, buffer, out);  // warm-up, and the checked call
            if (!chosen[c]->check(buffer, out, rank, n)) right[c][s] = false;
            group.Barrier(kTimeout);
            const Clock::time_point begin = Clock::now();
            for (int i = 0; i < iterations; ++i) chosen[c]->run(group, buffer, out);
            group.Barrier(kTimeout);
            if (rank == 0) {
              seconds[c][s] =
                  std::chrono::duration<double>(Clock::now() - begin).count() / iterations;
            }
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < n; ++rank) {
    BATON_CHECK(errors[static_cast<size_t>(rank)].empty(), "rank {}: {}", rank,
                errors[static_cast<size_t>(rank)]);
  }
}

int Run(const Options& options) {
  const int n = options.ranks;
  BATON_CHECK(n >= 2 && n <= 64, "--ranks {}: must be in [2, 64]", n);
  BATON_CHECK(options.min_bytes >= 4 * n && options.min_bytes <= options.max_bytes,
              "--min-bytes {} must be at least 4 x ranks and at most --max-bytes {}",
              options.min_bytes, options.max_bytes);
  std::vector<const Collective*> chosen;
  for (const Collective& c : Collectives()) {
    if (options.collectives == "all" ||
        ("," + options.collectives + ",").find("," + c.name + ",") != std::string::npos) {
      chosen.push_back(&c);
    }
  }
  BATON_CHECK(!chosen.empty(),
              "--collectives {}: none of all_reduce, reduce_scatter, "
              "all_gather, all_to_all, send_recv",
              options.collectives);
  BATON_CHECK(
      options.transport == "both" || options.transport == "shm" || options.transport == "tcp",
      "--transport {}: one of both, shm, tcp", options.transport);
  BATON_CHECK(options.rank < n && (options.rank < 0 || !options.store.empty()),
              "--rank {} needs --store and must be below --ranks {}", options.rank, n);
  const bool prints = options.rank <= 0;  // the threads' process, or process rank 0
  if (prints) {
    std::cout << fmt::format(
        "comm_bench: {} ranks as {} ({})\n", n,
        options.rank < 0
            ? std::string("threads of one process")
            : fmt::format("processes, this one rank 0 listening on {}", options.listen),
        bench::LoadAverage());
  }
  // A process rank other than 0 has no timings (rank 0 takes them): it prints its checks only.
  std::ostringstream discarded;
  std::ostream& out = prints ? std::cout : discarded;
  const double memcpy_bps = MemcpyBandwidth(std::min<int64_t>(options.max_bytes, 64 << 20));
  out << fmt::format("memcpy bandwidth (one core, {}): {:.2f} GB/s\n",
                     Size(std::min<int64_t>(options.max_bytes, 64 << 20)), memcpy_bps / 1e9);

  // Sizes: powers of 2 from min to max bytes, each a multiple of 4 x ranks (f32 slices).
  std::vector<int64_t> sizes;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    sizes.push_back(bytes / (4 * n) * (4 * n));
  }
  bool all_right = true;
  std::vector<double> all_reduce_busbw[2];  // [tcp, shm] per size, where measured
  for (const bool shared_memory : {true, false}) {
    if (options.transport == (shared_memory ? "tcp" : "shm")) continue;
    const char* transport = shared_memory ? "shared memory" : "Gloo over TCP";
    std::vector<std::vector<double>> seconds;
    std::vector<std::vector<bool>> right;
    Measure(options, shared_memory, chosen, sizes, seconds, right);
    for (size_t c = 0; c < chosen.size(); ++c) {
      bench::Table table(
          {"size", "time us", "algbw GB/s", "busbw GB/s", "busbw / memcpy", "check"});
      for (size_t s = 0; s < sizes.size(); ++s) {
        const double algbw = static_cast<double>(sizes[s]) / seconds[c][s];
        const double busbw = algbw * chosen[c]->bus_factor(n);
        if (chosen[c]->name == "all_reduce") all_reduce_busbw[shared_memory].push_back(busbw);
        all_right = all_right && right[c][s];
        table.AddRow({Size(sizes[s]), fmt::format("{:.1f}", seconds[c][s] * 1e6),
                      fmt::format("{:.3f}", algbw / 1e9), fmt::format("{:.3f}", busbw / 1e9),
                      fmt::format("{:.1f}%", 100 * busbw / memcpy_bps),
                      right[c][s] ? "ok" : "WRONG"});
      }
      out << fmt::format("\n{} ({}, {} ranks)\n{}", chosen[c]->name, transport, n,
                         table.ToString());
    }
  }
  if (!all_reduce_busbw[0].empty() && !all_reduce_busbw[1].empty()) {
    bench::Table table({"size", "shm busbw GB/s", "tcp busbw GB/s", "shm / tcp"});
    for (size_t s = 0; s < sizes.size(); ++s) {
      table.AddRow({Size(sizes[s]), fmt::format("{:.3f}", all_reduce_busbw[1][s] / 1e9),
                    fmt::format("{:.3f}", all_reduce_busbw[0][s] / 1e9),
                    fmt::format("{:.1f}x", all_reduce_busbw[1][s] / all_reduce_busbw[0][s])});
    }
    out << fmt::format("\nall_reduce, shared memory over TCP ({} ranks)\n{}", n, table.ToString());
  }
  std::cout << fmt::format("\n{}{}; {}\n", prints ? "" : fmt::format("rank {}: ", options.rank),
                           all_right ? "checks passed" : "CHECKS FAILED", bench::LoadAverage());
  return all_right ? 0 : 1;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Options options;
  CLI::App app{
      "Baton's collectives at each message size (nccl-tests' figures), every result "
      "checked"};
  app.add_option("--ranks", options.ranks, "ranks, as threads with a communicator each");
  app.add_option("--min-bytes", options.min_bytes, "smallest message");
  app.add_option("--max-bytes", options.max_bytes, "largest message (powers of 2 between)");
  app.add_option("--collectives", options.collectives,
                 "all, or a comma list of all_reduce, reduce_scatter, all_gather, all_to_all, "
                 "send_recv");
  app.add_option("--iterations", options.iterations, "timed calls per figure, at most");
  app.add_option("--transport", options.transport, "both (shared memory, then TCP), shm or tcp");
  app.add_option("--rank", options.rank,
                 "be this rank alone, one process of --ranks (with --store and --listen)");
  app.add_option("--store", options.store, "a process rank's rendezvous directory");
  app.add_option("--listen", options.listen, "the address a process rank listens on");
  CLI11_PARSE(app, argc, argv);
  try {
    return baton::Run(options);
  } catch (const std::exception& e) {
    std::cerr << "comm_bench: error: " << e.what() << "\n";
    return 2;
  }
}
