#pragma once
// Routing policies: which instance gets a request, from a snapshot of the instances
// (docs/router.md).
//
//   round-robin  the next healthy instance in turn
//   least-load   the fewest requests in flight from this router; ties: the lower running +
//                waiting the instance reported on /metrics, then the turn
//   prefix       the instance with the most of the prompt's leading blocks cached (ties: least
//                load), unless that would leave it more than balance_factor x the mean in flight
//                (+ 1, so a lone request may always go where its prefix is): then least-load.
//                No instance holding any block: least-load.
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

struct InstanceView {
  bool healthy = true;
  int64_t in_flight = 0;       // requests this router has sent and not finished
  int64_t reported_load = 0;   // running + waiting from its /metrics; 0 when unknown
  int32_t matched_blocks = 0;  // the prompt's leading blocks its prefix index holds
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
