// `baton_faults`: the `baton` command line with the integration tests' fault hooks
// (tests/fault_injection.h) set from the environment. Only tests run it; workers it spawns are
// itself (/proc/self/exe), so they carry the hooks too.
#include "launcher/cli.h"
#include "tests/fault_injection.h"

int main(int argc, char** argv) {
  baton::SetFaultHooks(baton::EnvironmentFaultHooks());  // no thread exists yet
  return baton::BatonMain(argc, argv);
}
