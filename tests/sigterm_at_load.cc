// A library that sends its own process SIGTERM from its constructor: LD_PRELOADed into `baton`
// by tests/signal_test.cc, it is a stop signal that comes while the shared libraries initialise,
// before any static constructor of the program and long before main(), at the same point of
// start-up on any machine however fast or slow (no timing decides where it lands).
#include <signal.h>
#include <unistd.h>

namespace {

[[gnu::constructor]] void SigtermAtLoad() { kill(getpid(), SIGTERM); }

}  // namespace
