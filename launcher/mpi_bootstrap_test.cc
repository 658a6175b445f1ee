// ListenHostFor: the address a rank's transport listens on in a multi-node job.
#include "launcher/mpi_bootstrap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace baton {
namespace {

// Sets or clears BATON_HOST for one test, restoring it after.
class ScopedBatonHost {
 public:
  explicit ScopedBatonHost(const char* value) {
    const char* old = std::getenv("BATON_HOST");
    if (old != nullptr) saved_ = old;
    had_ = old != nullptr;
    if (value != nullptr) {
      setenv("BATON_HOST", value, 1);
    } else {
      unsetenv("BATON_HOST");
    }
  }
  ~ScopedBatonHost() {
    if (had_) {
      setenv("BATON_HOST", saved_.c_str(), 1);
    } else {
      unsetenv("BATON_HOST");
    }
  }

 private:
  std::string saved_;
  bool had_ = false;
};

TEST(ListenHostTest, ALoopbackCoordinatorMeansLoopback) {
  ScopedBatonHost none(nullptr);
  EXPECT_EQ(ListenHostFor("127.0.0.1:29500"), "127.0.0.1");
  EXPECT_EQ(ListenHostFor("localhost:29500"), "127.0.0.1");
}

TEST(ListenHostTest, BatonHostWins) {
  ScopedBatonHost host("10.9.8.7");
  EXPECT_EQ(ListenHostFor("127.0.0.1:29500"), "10.9.8.7");
}

TEST(ListenHostTest, AnUnresolvableCoordinatorNamesItAndBatonHost) {
  ScopedBatonHost none(nullptr);
  try {
    ListenHostFor("no-such-host.invalid:29500");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the coordinator's host no-such-host.invalid does not resolve"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("set BATON_HOST"), std::string::npos) << what;
  }
  EXPECT_THROW(ListenHostFor("no-port"), Error);
}

}  // namespace
}  // namespace baton
