#include "bench/synthetic_workloads.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/random.h"
#include "core/error.h"

namespace strata::bench {
namespace {

constexpr int32_t kMaxLength = int32_t{1} << 30;
// Stream ids, so each part of a workload draws from its own stream.
constexpr uint64_t kSharedPrefixStream = 1;
constexpr uint64_t kRequestStreamBase = 1000;

std::vector<int32_t> random_tokens(BenchRng& rng, int64_t n, int64_t vocab_size) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.uniform_int(0, vocab_size - 1));
  return tokens;
}

int32_t draw(BenchRng& rng, const LengthRange& r) {
  return static_cast<int32_t>(rng.uniform_int(r.min, r.max));
}

int32_t scaled(double length, double scale, int32_t min_value) {
  const double v = std::round(length * scale);
  return static_cast<int32_t>(std::clamp(v, static_cast<double>(min_value), double{kMaxLength}));
}

LengthRange scaled(const LengthRange& r, double scale) {
  return {scaled(r.min, scale, 1), scaled(r.max, scale, 1)};
}

void check_limits(const WorkloadLimits& limits) {
  if (limits.vocab_size < 1) throw Error("the model has an empty vocabulary");
  if (limits.max_model_len < 2) throw Error("the max model length must be at least 2");
}

std::string format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string range_text(const LengthRange& r) {
  return r.min == r.max ? std::to_string(r.min)
                        : std::to_string(r.min) + ":" + std::to_string(r.max);
}

}  // namespace

LengthRange parse_length_range(std::string_view text, std::string_view flag, int32_t min_value) {
  const auto bad = [&](const std::string& why) {
    return Error(std::string(flag) + " '" + std::string(text) + "': " + why);
  };
  const auto parse_one = [&](std::string_view s) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      throw bad("expected a token count N or a range A:B");
    }
    if (v < min_value || v > kMaxLength) {
      throw bad("lengths must lie in [" + std::to_string(min_value) + ", " +
                std::to_string(kMaxLength) + "]");
    }
    return static_cast<int32_t>(v);
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    const int32_t v = parse_one(text);
    return {v, v};
  }
  const LengthRange r{parse_one(text.substr(0, colon)), parse_one(text.substr(colon + 1))};
  if (r.min > r.max) throw bad("the range's lower end is above its upper end");
  return r;
}

Workload make_random_workload(const RandomWorkloadConfig& c, const WorkloadLimits& limits) {
  check_limits(limits);
  if (c.num_prompts < 1) throw Error("--num-prompts must be at least 1");
  const int64_t longest = int64_t{c.prefix_len} + c.input_len.max + c.output_len.max;
  if (longest > limits.max_model_len) {
    throw Error("random workload: prefix " + std::to_string(c.prefix_len) + " + input " +
                std::to_string(c.input_len.max) + " + output " + std::to_string(c.output_len.max) +
                " tokens exceed the max model length " + std::to_string(limits.max_model_len));
  }
  Workload w;
  w.name = "random";
  w.description = format("%lld prompts, input %s, output %s, shared prefix %d, seed %llu",
                         static_cast<long long>(c.num_prompts), range_text(c.input_len).c_str(),
                         range_text(c.output_len).c_str(), c.prefix_len,
                         static_cast<unsigned long long>(limits.seed));
  BenchRng prefix_rng(limits.seed, kSharedPrefixStream);
  const std::vector<int32_t> prefix = random_tokens(prefix_rng, c.prefix_len, limits.vocab_size);
  w.requests.reserve(static_cast<size_t>(c.num_prompts));
  for (int64_t i = 0; i < c.num_prompts; ++i) {
    BenchRng rng(limits.seed, kRequestStreamBase + static_cast<uint64_t>(i));
    BenchRequest r;
    const int32_t input_len = draw(rng, c.input_len);
    r.output_len = draw(rng, c.output_len);
    r.tokens = prefix;
    const std::vector<int32_t> rest = random_tokens(rng, input_len, limits.vocab_size);
    r.tokens.insert(r.tokens.end(), rest.begin(), rest.end());
    r.planned_prompt_len = static_cast<int32_t>(r.tokens.size());
    w.requests.push_back(std::move(r));
  }
  return w;
}

Workload make_sharegpt_workload(const ShareGptWorkloadConfig& c, const WorkloadLimits& limits) {
  check_limits(limits);
  if (c.num_prompts < 1) throw Error("--num-prompts must be at least 1");
  for (const LogNormalLength* l : {&c.input, &c.output}) {
    if (!(l->median > 0) || !(l->sigma >= 0) || !std::isfinite(l->median) ||
        !std::isfinite(l->sigma)) {
      throw Error("sharegpt-like: medians must be positive and sigmas non-negative");
    }
  }
  if (!(c.length_scale > 0) || !std::isfinite(c.length_scale)) {
    throw Error("--length-scale must be positive");
  }
  Workload w;
  w.name = "sharegpt-like";
  w.description = format(
      "%lld prompts, input lognormal(median %.2f, sigma %.2f), output lognormal(median %.2f, "
      "sigma %.2f), length scale %g, clamped to %lld tokens, seed %llu",
      static_cast<long long>(c.num_prompts), c.input.median, c.input.sigma, c.output.median,
      c.output.sigma, c.length_scale, static_cast<long long>(limits.max_model_len),
      static_cast<unsigned long long>(limits.seed));
  const auto max_len = static_cast<int32_t>(std::min<int64_t>(limits.max_model_len, kMaxLength));
  for (int64_t i = 0; i < c.num_prompts; ++i) {
    BenchRng rng(limits.seed, kRequestStreamBase + static_cast<uint64_t>(i));
    const double in = rng.lognormal(std::log(c.input.median), c.input.sigma);
    const double out = rng.lognormal(std::log(c.output.median), c.output.sigma);
    BenchRequest r;
    r.output_len = std::min(scaled(out, c.length_scale, 1), max_len - 1);
    const int32_t input_len = std::min(scaled(in, c.length_scale, 1), max_len - r.output_len);
    r.tokens = random_tokens(rng, input_len, limits.vocab_size);
    r.planned_prompt_len = input_len;
    w.requests.push_back(std::move(r));
  }
  return w;
}

Workload make_agentic_workload(const AgenticWorkloadConfig& c, const WorkloadLimits& limits) {
  check_limits(limits);
  if (c.num_sessions < 1) throw Error("--num-sessions must be at least 1");
  if (!(c.length_scale > 0) || !std::isfinite(c.length_scale)) {
    throw Error("--length-scale must be positive");
  }
  if (!(c.think_s >= 0) || !std::isfinite(c.think_s)) throw Error("--think-time-ms must be >= 0");
  const int32_t system_len = scaled(c.system_prompt_len, c.length_scale, 0);
  const LengthRange turn_in = scaled(c.turn_input_len, c.length_scale);
  const LengthRange turn_out = scaled(c.turn_output_len, c.length_scale);
  if (int64_t{system_len} + turn_in.max + turn_out.max > limits.max_model_len) {
    throw Error("agentic: the system prefix (" + std::to_string(system_len) +
                ") + one turn's input and output (" + std::to_string(turn_in.max) + " + " +
                std::to_string(turn_out.max) + ") exceed the max model length " +
                std::to_string(limits.max_model_len) + "; lower --length-scale");
  }
  Workload w;
  w.name = "agentic";
  w.description = format(
      "%lld sessions of %s turns, system prefix %d, new tokens per turn %s, output %s (length "
      "scale %g), think %g ms, seed %llu",
      static_cast<long long>(c.num_sessions), range_text(c.turns).c_str(), system_len,
      range_text(turn_in).c_str(), range_text(turn_out).c_str(), c.length_scale, c.think_s * 1e3,
      static_cast<unsigned long long>(limits.seed));
  w.num_sessions = c.num_sessions;
  BenchRng prefix_rng(limits.seed, kSharedPrefixStream);
  const std::vector<int32_t> system = random_tokens(prefix_rng, system_len, limits.vocab_size);
  for (int64_t s = 0; s < c.num_sessions; ++s) {
    BenchRng rng(limits.seed, kRequestStreamBase + static_cast<uint64_t>(s));
    const int32_t num_turns = draw(rng, c.turns);
    int64_t context = 0;  // planned prompt + output of the previous turn
    for (int32_t t = 0; t < num_turns; ++t) {
      const int32_t new_len = draw(rng, turn_in);
      const int32_t out_len = draw(rng, turn_out);
      const int64_t prompt_len = (t == 0 ? system_len : context) + new_len;
      if (prompt_len + out_len > limits.max_model_len) break;  // the session hit its context limit
      BenchRequest r;
      r.session_idx = s;
      r.turn_idx = t;
      r.extends_previous = t > 0;
      if (t == 0) r.tokens = system;
      const std::vector<int32_t> fresh = random_tokens(rng, new_len, limits.vocab_size);
      r.tokens.insert(r.tokens.end(), fresh.begin(), fresh.end());
      r.output_len = out_len;
      r.planned_prompt_len = static_cast<int32_t>(prompt_len);
      r.think_s = t > 0 ? c.think_s : 0.0;
      w.requests.push_back(std::move(r));
      context = prompt_len + out_len;
    }
  }
  return w;
}

}  // namespace strata::bench
