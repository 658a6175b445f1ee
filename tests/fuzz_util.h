// Helpers of the fuzz tests (tests/*_fuzz_test.cc, label `fuzz`): deterministic cases, each run
// under a watchdog, and the byte mutations they share.
//
// Every fuzzer draws case i from std::mt19937_64 seeded with CaseSeed(fuzzer seed, i), so a failure
// message ("config fuzz seed 0x... case 17") is enough to run that case again alone:
//   BATON_FUZZ_CASE=17 build/fuzz_test --gtest_filter='ConfigFuzz*'
// BATON_FUZZ_CASES=N runs N cases per fuzzer instead of kDefaultCases (a longer local hunt).
//
// A case must end in success or a baton::Error; anything else thrown is a failure naming the case
// and the exception's type. A case that has not ended after kCaseTimeout is a hang: the test
// reports it and ends the process (a stuck thread cannot be stopped). The bound only turns a hang
// into a failure; no outcome depends on timing.
#pragma once

#include <cxxabi.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>

#include "core/error.h"

namespace baton::fuzz {

inline constexpr int kDefaultCases = 200;
inline constexpr std::chrono::seconds kCaseTimeout{60};

inline int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text == nullptr || *text == '\0' ? fallback : std::atoi(text);
}

// The cases a fuzzer runs: 0 .. NumCases()-1, or only BATON_FUZZ_CASE when it is set.
inline std::vector<int> Cases() {
  const int only = EnvInt("BATON_FUZZ_CASE", -1);
  if (only >= 0) return {only};
  std::vector<int> cases(static_cast<size_t>(EnvInt("BATON_FUZZ_CASES", kDefaultCases)));
  for (size_t i = 0; i < cases.size(); ++i) cases[i] = static_cast<int>(i);
  return cases;
}

inline uint64_t CaseSeed(uint64_t fuzzer_seed, int index) {
  return fuzzer_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index);
}

// Names one case in every failure: "config fuzz seed 0x5eed0001 case 17".
struct CaseId {
  std::string fuzzer;
  uint64_t seed = 0;
  int index = 0;
  std::string ToString() const {
    std::ostringstream out;
    out << fuzzer << " fuzz seed 0x" << std::hex << seed << std::dec << " case " << index
        << " (rerun alone with BATON_FUZZ_CASE=" << index << ")";
    return out.str();
  }
};

// How a case ended: ok, or the baton::Error's message.
struct Outcome {
  bool ok = true;
  std::string error;
};

inline std::string TypeName(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type.name();
}

// Runs `body` on a thread of its own and waits at most kCaseTimeout (see the file comment). An
// exception other than baton::Error is a test failure naming `id`; the outcome is then an error
// too, so that callers' checks see no success. Failed EXPECTs inside `body` name `id` too.
inline Outcome RunCase(const CaseId& id, const std::function<void()>& body) {
  struct Result {
    Outcome outcome;
    std::string foreign;  // set when something other than a baton::Error was thrown
  };
  std::packaged_task<Result()> task([&id, &body] {
    SCOPED_TRACE(id.ToString());  // names the case in the body's own EXPECTs
    Result result;
    try {
      body();
    } catch (const Error& e) {
      result.outcome = {false, e.what()};
    } catch (const std::exception& e) {
      result.outcome = {false, e.what()};
      result.foreign = TypeName(typeid(e)) + ": " + e.what();
    } catch (...) {
      result.outcome = {false, "(unknown exception)"};
      result.foreign = "an exception that is not a std::exception";
    }
    return result;
  });
  std::future<Result> done = task.get_future();
  std::thread thread(std::move(task));
  if (done.wait_for(kCaseTimeout) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s did not finish within %lld s: a hang\n", id.ToString().c_str(),
                 static_cast<long long>(kCaseTimeout.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  thread.join();
  Result result = done.get();
  if (!result.foreign.empty()) {
    ADD_FAILURE() << id.ToString() << " threw " << result.foreign
                  << " (readers must throw baton::Error)";
  }
  return result.outcome;
}

// Checks an error message: valid UTF-8 (it crosses protobuf and JSON) and naming `needle`.
inline void ExpectErrorNames(const CaseId& id, const std::string& message,
                             const std::string& needle, const std::string& what) {
  EXPECT_EQ(ValidUtf8(message), message) << id.ToString() << ": the error is not valid UTF-8";
  EXPECT_NE(message.find(needle), std::string::npos)
      << id.ToString() << ": the error does not name " << what << " (" << needle
      << "): " << message;
}

// Caps the process's address space while a fuzzer runs, so that a reader asking for an absurd
// allocation fails with std::bad_alloc (a failure naming the case) instead of taking the machine's
// memory. Not under AddressSanitizer, whose shadow memory needs the address space.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(uint64_t bytes) {
#if !defined(__SANITIZE_ADDRESS__)
    if (getrlimit(RLIMIT_AS, &saved_) == 0) {
      rlimit capped = saved_;
      capped.rlim_cur = std::min<rlim_t>(saved_.rlim_max, bytes);
      active_ = setrlimit(RLIMIT_AS, &capped) == 0;
    }
#else
    (void)bytes;
#endif
  }
  ~AddressSpaceCap() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit saved_{};
  bool active_ = false;
};
inline constexpr uint64_t kAddressSpaceCap = uint64_t{8} << 30;

// Logs only errors while it lives: readers warn about what they skip, commands report progress,
// and a fuzzer's hundreds of cases would bury its failures.
class QuietLog {
 public:
  QuietLog() : saved_(spdlog::get_level()) { spdlog::set_level(spdlog::level::err); }
  ~QuietLog() { spdlog::set_level(saved_); }
  QuietLog(const QuietLog&) = delete;
  QuietLog& operator=(const QuietLog&) = delete;

 private:
  spdlog::level::level_enum saved_;
};

// Random choices of one case.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::mt19937_64& rng() { return rng_; }
  // Uniform in [0, n); n >= 1.
  size_t Below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  const T& Pick(const std::vector<T>& items) {
    return items[Below(items.size())];
  }
  std::string Junk(size_t n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(Below(256));
    return bytes;
  }

  // One byte-level change: flip bits, overwrite, insert, delete, duplicate or truncate.
  void MutateBytes(std::string& bytes) {
    const size_t size = bytes.size();
    switch (Below(size == 0 ? 1 : 7)) {
      case 0:
        bytes.insert(Below(size + 1), Junk(1 + Below(16)));
        break;
      case 1:
        bytes[Below(size)] ^= static_cast<char>(1u << Below(8));
        break;
      case 2:
        bytes[Below(size)] = static_cast<char>(Pick(kInterestingBytes));
        break;
      case 3: {
        const size_t at = Below(size);
        bytes.erase(at, 1 + Below(std::min<size_t>(size - at, 64)));
        break;
      }
      case 4: {
        const size_t at = Below(size);
        const std::string piece = bytes.substr(at, 1 + Below(64));
        bytes.insert(Below(size + 1), piece);
        break;
      }
      case 5:
        bytes.resize(Below(size + 1));
        break;
      case 6:
        for (size_t i = 0, n = 1 + Below(8); i < n; ++i)
          bytes[Below(size)] = static_cast<char>(Below(256));
        break;
    }
  }

 private:
  inline static const std::vector<int> kInterestingBytes = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0,
                                                            0xfe, '"',  '\\', '{',  '}',  '[',
                                                            ']',  ':',  ',',  '\n', '-',  '#'};
  std::mt19937_64 rng_;
};

// Numbers at the edges of the types readers convert to, as text (YAML and JSON both read them).
inline const std::vector<std::string>& BoundaryNumbers() {
  // clang-format off
  static const std::vector<std::string> numbers = {
      "0", "-1", "1", "2", "7", "127", "255", "256", "65535", "65536", "65537",
      "2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296",
      "4294967424", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
      "-9223372036854775809", "18446744073709551615", "18446744073709551616",
      "340282366920938463463374607431768211456", "1e308", "1e309", "-1e308", "1e-320", "0.5",
      "-0.0", "1.0", "3.999999999"};
  // clang-format on
  return numbers;
}

// JSON values readers must refuse or take exactly: wrong types, numbers past int, int64 and
// uint64, huge and nested values.
inline nlohmann::json OddJsonValue(Mutator& m) {
  switch (m.Below(20)) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return "";
    case 3:
      return "8";
    case 4:
      return -1;
    case 5:
      return 0;
    case 6:
      return INT64_MAX;
    case 7:
      return INT64_MIN;
    case 8:
      return UINT64_MAX;
    case 9:
      return uint64_t{1} << 31;
    case 10:
      return (uint64_t{1} << 32) + 8;
    case 11:
      return 1e308;
    case 12:
      return -0.5;
    case 13:
      return 8.0;
    case 14:
      return nlohmann::json::array();
    case 15:
      return nlohmann::json::object();
    case 16:
      return {1, 2, 3};
    case 17:
      return {{"a", 1}};
    case 18:
      return std::string(100000, 'x');
    default: {
      nlohmann::json nested = nlohmann::json::array();
      for (int i = 0; i < 2000; ++i) nested = nlohmann::json::array({nested});
      return nested;
    }
  }
}

// One structural change somewhere in `json`: a value replaced by an odd one, an integer moved by
// +-1 or 2^32, a key or element removed, an element duplicated, an unknown key added.
inline void MutateJson(Mutator& m, nlohmann::json& json) {
  std::vector<nlohmann::json*> nodes;
  const std::function<void(nlohmann::json&)> collect = [&](nlohmann::json& node) {
    nodes.push_back(&node);
    if (node.is_structured() && nodes.size() < 10000) {
      for (nlohmann::json& child : node) collect(child);
    }
  };
  collect(json);
  // Numbers half the time: they are where narrowing and range bugs hide.
  std::vector<nlohmann::json*> numbers;
  for (nlohmann::json* node : nodes) {
    if (node->is_number()) numbers.push_back(node);
  }
  nlohmann::json& node = !numbers.empty() && m.Chance(0.5) ? *numbers[m.Below(numbers.size())]
                                                           : *nodes[m.Below(nodes.size())];
  switch (m.Below(6)) {
    case 0:
    case 1:
      node = OddJsonValue(m);
      return;
    case 2:
      if (node.is_number_integer()) {
        // Wrapping arithmetic: the value may already be at an edge.
        const auto value = node.get<uint64_t>();
        node = static_cast<int64_t>(
            m.Pick(std::vector<uint64_t>{value + 1, value - 1, value + (uint64_t{1} << 32),
                                         value - (uint64_t{1} << 32), 0 - value}));
      } else {
        node = OddJsonValue(m);
      }
      return;
    case 3:
      if (node.is_object() && !node.empty()) {
        auto it = node.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(m.Below(node.size())));
        node.erase(it);
      } else if (node.is_array() && !node.empty()) {
        node.erase(m.Below(node.size()));
      }
      return;
    case 4:
      if (node.is_array() && !node.empty()) {
        node.push_back(node[m.Below(node.size())]);
      } else if (node.is_object()) {
        node["unknown"] = OddJsonValue(m);
      }
      return;
    default:
      if (node.is_object() && !node.empty()) {  // a value moved to another key
        auto from = node.begin(), to = node.begin();
        std::advance(from, static_cast<std::ptrdiff_t>(m.Below(node.size())));
        std::advance(to, static_cast<std::ptrdiff_t>(m.Below(node.size())));
        *to = nlohmann::json(*from);
      }
      return;
  }
}

// A regular file's bytes; "" for anything else (a FIFO or a link to /dev/zero that a case put
// there would block or never end).
inline std::string ReadBytes(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, error))) return "";
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Writes `bytes` to `path` as a regular file, replacing whatever special file is there.
inline void WriteBytes(const std::string& path, std::string_view bytes) {
  std::error_code error;
  const auto status = std::filesystem::symlink_status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    std::filesystem::remove_all(path);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace baton::fuzz
