#include "strata/token_output.h"

namespace strata {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
  }
  return "?";
}

}  // namespace strata
