#pragma once
// The CPU KV pool's layout, decided once at start-up by the engine
// (docs/kv-quant.md): the dtype, its FP8 scales (kv_scales_setup.h) and the per-layer
// exceptions -- the layers --kv-cache-dtype-skip-layers names, plus, with --kv-quant-check, the
// layers whose measured error is above the threshold (kv_quant_check.h). Excepted layers hold
// `full_precision` (F32 on the CPU: what --kv-cache-dtype auto picks).

#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kv_quant_check.h"
#include "engine/kv_scales_setup.h"
#include "kv/kv_layer_dtypes.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace strata::engine {

struct KvLayoutOptions {
  KvScalesOptions scales;  // the dtype, FP8 scale sources, model_dir (calibration tokenizer)
  KvSkipLayers skip_layers;
  bool quant_check = false;
  double quant_check_threshold = kDefaultKvQuantCheckThreshold;
  DType full_precision = DType::kF32;
  KvQuantCheckProgress quant_check_progress;  // the check's progress (none when empty)
};

struct ResolvedKvLayout {
  kv::KvSpec spec;  // layer_dtypes set when some layer is excepted
  kv::KvStaticScales scales;
  std::string scales_source;                      // empty unless the dtype is fp8
  std::optional<KvQuantCheckReport> quant_check;  // when --kv-quant-check ran
};

// InvalidArgument for a skip-layer index outside the model, a threshold that is not a finite
// non-negative number, and whatever resolve_kv_scales refuses. The check runs only when the
// dtype differs from full_precision (there is nothing to measure otherwise).
Result<ResolvedKvLayout> resolve_kv_layout(const KvLayoutOptions& options, model::Model& model,
                                           ThreadPool& pool);

}  // namespace strata::engine
