// wasm32-wasi AOT runtime only (see c++config.h here): libstdc++'s single-threaded model
// instead of the host's POSIX threads one.
#include <bits/gthr-single.h>
