// cuvil-patch-sandbox: the program cuvil-server starts to compile and first run one IR hot patch
// (patch_sandbox.h says what it gets and returns). Not for use by hand.
#include "patch_sandbox.h"

int main(int argc, char** argv) { return cuvil::jitcache_internal::SandboxChild::Main(argc, argv); }
