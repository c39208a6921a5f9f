#pragma once
// The engine's side of Status and Result<T> (the types are the public API's, strata/status.h):
// the propagation macro, and STRATA_CHECK (core/check.h) beside it.

#include "core/check.h"
#include "strata/status.h"

// Propagates a non-OK Status from an expression returning Status.
#define STRATA_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::strata::Status strata_status_ = (expr); \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)
