#pragma once
// Routing policies: which instance gets a request, from a snapshot of the instances
// (docs/router.md).
//
//   round-robin  the next healthy instance in turn
//   least-load   the fewest requests in flight from this router; ties: the lower running +
//                waiting the instance reported on /metrics, then the turn
//   prefix       the instance with the best score for the prompt's leading blocks it holds (ties:
//                least load), unless that would leave it more than balance_factor x the mean in
//                flight (+ 1, so a lone request may always go where its prefix is): then
//                least-load. No instance holding any block: least-load. A block in the pool
//                scores 1, one the instance would bring back from its host tier
//                kHostBlockWeight, from its disk kDiskBlockWeight: a tier hit costs a copy or a
//                read, computing the block costs more (docs/router.md).
//
// Pure functions of their arguments: thread-safe, O(instances).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace strata::router {

enum class Policy { kPrefix, kLeastLoad, kRoundRobin };

// What decided a request's instance, counted per value on /metrics.
enum class Decision { kRoundRobin, kLeastLoad, kPrefixMatch, kPrefixNoMatch, kPrefixOverloaded };
inline constexpr Decision kAllDecisions[] = {Decision::kRoundRobin, Decision::kLeastLoad,
                                             Decision::kPrefixMatch, Decision::kPrefixNoMatch,
                                             Decision::kPrefixOverloaded};

std::string_view policy_name(Policy p);
std::optional<Policy> policy_from_name(std::string_view name);
std::string_view decision_name(Decision d);

inline constexpr double kHostBlockWeight = 0.8;
inline constexpr double kDiskBlockWeight = 0.5;

struct InstanceView {
  bool healthy = true;
  int64_t in_flight = 0;       // requests this router has sent and not finished
  int64_t reported_load = 0;   // running + waiting from its /metrics; 0 when unknown
  // The prompt's leading blocks its prefix index holds: in the pool, and after those (in the
  // same run) only in its host tier or only on its disk.
  int32_t matched_blocks = 0;
  int32_t matched_host_blocks = 0;
  int32_t matched_disk_blocks = 0;

  double prefix_score() const {
    return matched_blocks + kHostBlockWeight * matched_host_blocks +
           kDiskBlockWeight * matched_disk_blocks;
  }
};

struct Choice {
  size_t instance = 0;
  Decision decision = Decision::kRoundRobin;
};

// turn: a counter the caller advances per request (rotates round-robin and the last tie-break);
// balance_factor > 0. nullopt when no instance is healthy.
std::optional<Choice> choose_instance(Policy policy, std::span<const InstanceView> instances,
                                      uint64_t turn, double balance_factor);

}  // namespace strata::router
