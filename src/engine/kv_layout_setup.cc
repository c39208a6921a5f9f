#include "engine/kv_layout_setup.h"

#include <cmath>
#include <utility>
#include <vector>

namespace strata::engine {

Result<ResolvedKvLayout> resolve_kv_layout(const KvLayoutOptions& o, model::Model& model,
                                           ThreadPool& pool) {
  if (!(std::isfinite(o.quant_check_threshold) && o.quant_check_threshold >= 0.0)) {
    return Status::InvalidArgument("--kv-quant-check-threshold must be a finite number >= 0");
  }
  const DType dtype = o.scales.kv_dtype;
  Result<std::vector<bool>> mask =
      kv::kv_skip_layer_mask(o.skip_layers, model.config().layer_sliding_window);
  if (!mask.ok()) return mask.status();
  const Result<ResolvedKvScales> scales = resolve_kv_scales(o.scales, model, pool);
  if (!scales.ok()) return scales.status();
  ResolvedKvLayout r;
  r.scales = scales.value().scales;
  if (!r.scales.k.empty()) r.scales_source = scales.value().source;
  if (o.quant_check && dtype != o.full_precision) {
    const std::vector<int32_t> tokens = kv_calibration_tokens(model, o.scales.model_dir);
    const kv::KvLayout quantized(model.kv_spec(dtype), 16, r.scales);
    Result<KvQuantCheckReport> report =
        run_kv_quant_check(model, pool, tokens, quantized, o.quant_check_threshold,
                           o.quant_check_progress);
    if (!report.ok()) return report.status();
    for (const int32_t l : report.value().kept_layers())
      mask.value()[static_cast<size_t>(l)] = true;
    r.quant_check = std::move(report).value();
  }
  r.spec = model.kv_spec(dtype);
  if (dtype != o.full_precision) {
    r.spec.layer_dtypes = kv::kv_layer_dtypes(dtype, o.full_precision, mask.value());
  }
  return r;
}

}  // namespace strata::engine
