#pragma once
// The main of a benchmark program around its run(argc, argv): an exception escaping run is one
// line, "name: what", on stderr and exit status 1, never an abort with a trace.

#include <cstdio>
#include <exception>

namespace strata::bench {

inline int guarded_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace strata::bench
