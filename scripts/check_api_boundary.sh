#!/usr/bin/env bash
# The engine's API boundary (docs/architecture.md, "The public API"); run by scripts/test.sh.
#   1. include/strata/ (the engine, its config, its requests, outputs and their vocabulary)
#      includes the standard library and itself, never a header of src/.
#   2. Inside src/, the Engine itself (strata/engine.h) is named only by its implementation
#      (src/engine/engine_impl.h) and by its clients' headers (src/server/); every other internal
#      header takes the plain data it needs from the smaller public headers.
#   3. src/ is on no include path and no include spells a path into it: a target reaches another
#      folder's headers only through the targets it links (cmake/strata_defaults.cmake,
#      strata_module_headers), which the compiler then enforces.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0
fail() {
  echo "check_api_boundary: $*" >&2
  failed=1
}

while IFS= read -r hit; do
  fail "$hit: a public header includes a header outside include/strata"
done < <(grep -Hn '^#include "' include/strata/*.h | grep -v '#include "strata/' || true)

while IFS= read -r file; do
  fail "$file: an internal header includes strata/engine.h (take strata/engine_config.h, request.h, ...)"
done < <(grep -rl --include='*.h' --include='*.cuh' '#include "strata/engine.h"' src |
           grep -vE '^src/(engine/engine_impl\.h|server/)' || true)

while IFS= read -r hit; do
  fail "$hit: src/ on an include path (use strata_module_headers and link the target)"
done < <(grep -rn --include=CMakeLists.txt --include='*.cmake' 'include_directories' \
           CMakeLists.txt cmake src tools tests bench fuzz | grep -E '/src([/ )"]|$)' || true)

while IFS= read -r hit; do
  fail "$hit: an include spells a path into src/"
done < <(grep -rnE --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
           '^#include "([.][.]/)*src/' src include tools tests bench fuzz || true)

((failed == 0)) || exit 1
echo "check_api_boundary: include/strata includes nothing internal; src/ is on no include path"
