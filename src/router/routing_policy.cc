#include "router/routing_policy.h"

#include <algorithm>
#include <tuple>

namespace strata::router {
namespace {

// The healthy instance with the least (in_flight, reported_load, distance from turn), among
// those `eligible` accepts.
template <typename Eligible>
std::optional<size_t> least_loaded(std::span<const InstanceView> v, uint64_t turn,
                                   Eligible eligible) {
  std::optional<size_t> best;
  std::tuple<int64_t, int64_t, size_t> best_key;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].healthy || !eligible(i)) continue;
    const size_t distance = (i + v.size() - static_cast<size_t>(turn % v.size())) % v.size();
    const std::tuple<int64_t, int64_t, size_t> key{v[i].in_flight, v[i].reported_load, distance};
    if (!best || key < best_key) {
      best = i;
      best_key = key;
    }
  }
  return best;
}

}  // namespace

std::string_view policy_name(Policy p) {
  switch (p) {
    case Policy::kPrefix:
      return "prefix";
    case Policy::kLeastLoad:
      return "least-load";
    case Policy::kRoundRobin:
      return "round-robin";
  }
  return "?";
}

std::optional<Policy> policy_from_name(std::string_view name) {
  for (const Policy p : {Policy::kPrefix, Policy::kLeastLoad, Policy::kRoundRobin}) {
    if (policy_name(p) == name) return p;
  }
  return std::nullopt;
}

std::string_view decision_name(Decision d) {
  switch (d) {
    case Decision::kRoundRobin:
      return "round_robin";
    case Decision::kLeastLoad:
      return "least_load";
    case Decision::kPrefixMatch:
      return "prefix_match";
    case Decision::kPrefixNoMatch:
      return "prefix_no_match";
    case Decision::kPrefixOverloaded:
      return "prefix_overloaded";
  }
  return "?";
}

std::optional<Choice> choose_instance(Policy policy, std::span<const InstanceView> v, uint64_t turn,
                                      double balance_factor) {
  const auto any = [](size_t) { return true; };
  if (v.empty()) return std::nullopt;
  switch (policy) {
    case Policy::kRoundRobin:
      for (size_t k = 0; k < v.size(); ++k) {
        const auto i = static_cast<size_t>((turn + k) % v.size());
        if (v[i].healthy) return Choice{i, Decision::kRoundRobin};
      }
      return std::nullopt;
    case Policy::kLeastLoad:
      if (const std::optional<size_t> i = least_loaded(v, turn, any)) {
        return Choice{*i, Decision::kLeastLoad};
      }
      return std::nullopt;
    case Policy::kPrefix:
      break;
  }
  double most = 0.0;
  int64_t total = 1;  // the request being placed
  size_t num_healthy = 0;
  for (const InstanceView& x : v) {
    if (!x.healthy) continue;
    most = std::max(most, x.prefix_score());
    total += x.in_flight;
    ++num_healthy;
  }
  const std::optional<size_t> fallback = least_loaded(v, turn, any);
  if (!fallback) return std::nullopt;
  if (most == 0.0) return Choice{*fallback, Decision::kPrefixNoMatch};
  const size_t best =
      *least_loaded(v, turn, [&](size_t i) { return v[i].prefix_score() == most; });
  const double mean = static_cast<double>(total) / static_cast<double>(num_healthy);
  if (static_cast<double>(v[best].in_flight + 1) > balance_factor * mean + 1.0) {
    return Choice{*fallback, Decision::kPrefixOverloaded};
  }
  return Choice{best, Decision::kPrefixMatch};
}

}  // namespace strata::router
