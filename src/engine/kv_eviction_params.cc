#include <algorithm>
#include <string>

#include "core/status.h"
#include "strata/kv_eviction.h"

namespace strata {
namespace {

Status count_error(const char* field, const char* expected, int64_t got) {
  return Status::InvalidArgument(std::string(field) + " must be " + expected + ", got " +
                                 std::to_string(got));
}

// The window a policy takes when neither the request nor the defaults name one.
int32_t default_window(const ResolvedKvEviction& e) {
  const int32_t rest = e.budget_tokens - e.sink_tokens;
  switch (e.policy) {
    case KvEvictionPolicy::kStreamingLlm:
      return rest;
    case KvEvictionPolicy::kH2O:
      return std::min(e.budget_tokens / 2, rest);
    case KvEvictionPolicy::kSnapKv:
      return std::min({KvEvictionParams::kDefaultSnapKvWindowTokens, e.budget_tokens / 2, rest});
    case KvEvictionPolicy::kNone:
    case KvEvictionPolicy::kPagedEviction:
      break;
  }
  return 0;
}

}  // namespace

const char* kv_eviction_policy_name(KvEvictionPolicy policy) {
  switch (policy) {
    case KvEvictionPolicy::kNone:
      return "none";
    case KvEvictionPolicy::kStreamingLlm:
      return "streaming_llm";
    case KvEvictionPolicy::kPagedEviction:
      return "paged_eviction";
    case KvEvictionPolicy::kH2O:
      return "h2o";
    case KvEvictionPolicy::kSnapKv:
      return "snapkv";
  }
  return "unknown";
}

std::optional<KvEvictionPolicy> parse_kv_eviction_policy(std::string_view name) {
  for (const KvEvictionPolicy p :
       {KvEvictionPolicy::kNone, KvEvictionPolicy::kStreamingLlm, KvEvictionPolicy::kPagedEviction,
        KvEvictionPolicy::kH2O, KvEvictionPolicy::kSnapKv}) {
    if (name == kv_eviction_policy_name(p)) return p;
  }
  return std::nullopt;
}

const char* kv_eviction_selection_name(KvEvictionSelection selection) {
  switch (selection) {
    case KvEvictionSelection::kPerHead:
      return "per_head";
    case KvEvictionSelection::kShared:
      return "shared";
  }
  return "unknown";
}

std::optional<KvEvictionSelection> parse_kv_eviction_selection(std::string_view name) {
  for (const KvEvictionSelection s :
       {KvEvictionSelection::kPerHead, KvEvictionSelection::kShared}) {
    if (name == kv_eviction_selection_name(s)) return s;
  }
  return std::nullopt;
}

const char* kv_eviction_pooling_name(KvEvictionPooling pooling) {
  switch (pooling) {
    case KvEvictionPooling::kMax:
      return "max";
    case KvEvictionPooling::kAvg:
      return "avg";
  }
  return "unknown";
}

std::optional<KvEvictionPooling> parse_kv_eviction_pooling(std::string_view name) {
  for (const KvEvictionPooling p : {KvEvictionPooling::kMax, KvEvictionPooling::kAvg}) {
    if (name == kv_eviction_pooling_name(p)) return p;
  }
  return std::nullopt;
}

Status validate_kv_eviction(const KvEvictionParams& p) {
  constexpr int32_t kMax = KvEvictionParams::kMaxTokens;
  if (p.budget_tokens < 0 || p.budget_tokens > kMax) {
    return count_error("budget_tokens", "in [1, 2^30] (0 = the server's default)", p.budget_tokens);
  }
  if (p.sink_tokens < -1 || p.sink_tokens > kMax) {
    return count_error("sink_tokens", "in [0, 2^30]", p.sink_tokens);
  }
  if (p.window_tokens < -1 || p.window_tokens > kMax) {
    return count_error("window_tokens", "in [0, 2^30]", p.window_tokens);
  }
  if (p.pool_kernel != -1 &&
      (p.pool_kernel < 1 || p.pool_kernel > KvEvictionParams::kMaxPoolKernel ||
       p.pool_kernel % 2 == 0)) {
    return count_error("pool_kernel", "odd, in [1, 1023]", p.pool_kernel);
  }
  if (p.selection_at_tokens < 0 || p.selection_at_tokens > kMax) {
    return count_error("selection_at_tokens", "in [0, 2^30]", p.selection_at_tokens);
  }
  const bool snap_fields =
      p.selection || p.pooling || p.pool_kernel != -1 || p.selection_at_tokens != 0;
  if (snap_fields && p.policy && *p.policy != KvEvictionPolicy::kSnapKv &&
      *p.policy != KvEvictionPolicy::kNone) {
    return Status::InvalidArgument(
        std::string("selection, pooling, pool_kernel and selection_at_tokens apply to policy "
                    "snapkv only, not ") +
        kv_eviction_policy_name(*p.policy));
  }
  if (p.budget_tokens > 0 && p.sink_tokens >= 0 && p.window_tokens >= 0 &&
      int64_t{p.sink_tokens} + p.window_tokens > p.budget_tokens) {
    return Status::InvalidArgument(
        "sink_tokens + window_tokens must not exceed budget_tokens, got " +
        std::to_string(p.sink_tokens) + " + " + std::to_string(p.window_tokens) + " > " +
        std::to_string(p.budget_tokens));
  }
  return Status::Ok();
}

Result<ResolvedKvEviction> resolve_kv_eviction(const std::optional<KvEvictionParams>& request,
                                               const KvEvictionParams& defaults) {
  if (request) STRATA_RETURN_IF_ERROR(validate_kv_eviction(*request));
  const KvEvictionParams none;
  const KvEvictionParams& r = request ? *request : none;
  ResolvedKvEviction out;
  out.policy = r.policy.value_or(defaults.policy.value_or(KvEvictionPolicy::kNone));
  if (out.policy == KvEvictionPolicy::kNone) return out;
  out.budget_tokens = r.budget_tokens > 0 ? r.budget_tokens : defaults.budget_tokens;
  if (out.budget_tokens <= 0) {
    return Status::InvalidArgument(std::string("budget_tokens is required with policy ") +
                                   kv_eviction_policy_name(out.policy) +
                                   " (the request names none, nor does --kv-budget-tokens)");
  }
  const bool streaming = out.policy == KvEvictionPolicy::kStreamingLlm;
  // The defaults' sink and window apply only where the defaults' policy is this one.
  const bool same_policy = defaults.policy == out.policy;
  out.sink_tokens = r.sink_tokens >= 0                         ? r.sink_tokens
                    : same_policy && defaults.sink_tokens >= 0 ? defaults.sink_tokens
                    : streaming ? KvEvictionParams::kDefaultStreamingSinkTokens
                                : 0;
  if (out.sink_tokens > out.budget_tokens) {
    return Status::InvalidArgument("sink_tokens must not exceed budget_tokens, got " +
                                   std::to_string(out.sink_tokens) + " > " +
                                   std::to_string(out.budget_tokens));
  }
  out.window_tokens = r.window_tokens >= 0                         ? r.window_tokens
                      : same_policy && defaults.window_tokens >= 0 ? defaults.window_tokens
                                                                   : default_window(out);
  if (int64_t{out.sink_tokens} + out.window_tokens > out.budget_tokens) {
    return Status::InvalidArgument(
        "sink_tokens + window_tokens must not exceed budget_tokens, got " +
        std::to_string(out.sink_tokens) + " + " + std::to_string(out.window_tokens) + " > " +
        std::to_string(out.budget_tokens));
  }
  if (out.policy != KvEvictionPolicy::kSnapKv) {
    if (r.selection || r.pooling || r.pool_kernel != -1 || r.selection_at_tokens != 0) {
      return Status::InvalidArgument(
          std::string("selection, pooling, pool_kernel and selection_at_tokens apply to policy "
                      "snapkv only, not ") +
          kv_eviction_policy_name(out.policy));
    }
    return out;
  }
  // The defaults' SnapKV fields apply only where the defaults' policy is SnapKV too.
  const KvEvictionParams& d = same_policy ? defaults : none;
  out.selection = r.selection.value_or(d.selection.value_or(KvEvictionSelection::kPerHead));
  out.pooling = r.pooling.value_or(d.pooling.value_or(KvEvictionPooling::kMax));
  out.pool_kernel = r.pool_kernel != -1   ? r.pool_kernel
                    : d.pool_kernel != -1 ? d.pool_kernel
                                          : KvEvictionParams::kDefaultSnapKvPoolKernel;
  out.selection_at_tokens = r.selection_at_tokens;
  return out;
}

}  // namespace strata
