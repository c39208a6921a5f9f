#include "engine/kv_quant_check.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kv/kv_accounting.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace strata {

std::vector<int32_t> KvQuantCheckReport::kept_layers() const {
  std::vector<int32_t> kept;
  for (const KvQuantCheckLayer& l : layers) {
    if (l.kept) kept.push_back(l.layer_idx);
  }
  return kept;
}

}  // namespace strata

namespace strata::engine {

KvQuantCheckReport kv_quant_check_report(DType dtype, double threshold, int32_t num_tokens,
                                         std::span<const double> output_kl,
                                         std::span<const double> attn_error) {
  STRATA_CHECK(output_kl.size() == attn_error.size(), "kv_quant_check_report: sizes differ");
  KvQuantCheckReport r;
  r.dtype = dtype;
  r.threshold = threshold;
  r.num_tokens = num_tokens;
  for (size_t l = 0; l < output_kl.size(); ++l) {
    const double kl = output_kl[l];
    r.layers.push_back({static_cast<int32_t>(l), kl, attn_error[l], !(kl <= threshold)});
  }
  return r;
}

Result<KvQuantCheckReport> run_kv_quant_check(model::Model& model, ThreadPool& pool,
                                              std::span<const int32_t> tokens,
                                              const kv::KvLayout& quantized, double threshold,
                                              const KvQuantCheckProgress& progress) {
  const int32_t passes = quantized.spec().num_layers + 2;
  int32_t done = 0;
  auto after_pass = [&] {
    if (progress) progress(++done, passes);
  };
  const Result<std::vector<double>> kl =
      model.kv_quant_output_kl(tokens, quantized, pool, after_pass);
  if (!kl.ok()) return kl.status();
  const Result<std::vector<double>> attn = model.kv_quant_error(tokens, quantized, pool);
  if (!attn.ok()) return attn.status();
  after_pass();
  return kv_quant_check_report(quantized.spec().dtype, threshold,
                               static_cast<int32_t>(tokens.size()), kl.value(), attn.value());
}

std::string format_kv_quant_check(const KvQuantCheckReport& r, DType full_precision) {
  char line[256];
  std::snprintf(line, sizeof line,
                "strata: kv-quant-check %s over %d calibration tokens, threshold %g (output KL: "
                "mean KL in nats of the next-token distributions with only that layer "
                "quantized; attn error: relative L2 of its attention output):\n",
                kv::pool_dtype_name(r.dtype).c_str(), r.num_tokens, r.threshold);
  std::string out = line;
  out += "  layer  output KL  attn error  kept\n";
  const std::string kept_text = "yes, " + kv::pool_dtype_name(full_precision);
  for (const KvQuantCheckLayer& l : r.layers) {
    std::snprintf(line, sizeof line, "  %-5d  %-9.3e  %-10.3e  %s\n", l.layer_idx, l.output_kl,
                  l.attn_error, l.kept ? kept_text.c_str() : "");
    out += line;
  }
  const std::vector<int32_t> kept = r.kept_layers();
  std::string list;
  for (const int32_t l : kept) list += (list.empty() ? "" : ",") + std::to_string(l);
  const std::string what = kept.empty()
                               ? std::string("no layer")
                               : "layers " + list + " at " + kv::pool_dtype_name(full_precision);
  out += "strata: kv-quant-check keeps " + what + "; " +
         std::to_string(r.layers.size() - kept.size()) + " of " + std::to_string(r.layers.size()) +
         " layers " + kv::pool_dtype_name(r.dtype) + "\n";
  return out;
}

}  // namespace strata::engine
