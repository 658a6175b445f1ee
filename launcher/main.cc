// The `baton` binary: the command line (launcher/cli.h), with no fault hooks.
#include "launcher/cli.h"

int main(int argc, char** argv) { return baton::BatonMain(argc, argv); }
