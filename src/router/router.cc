#include "router/router.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_event_wire.h"
#include "router/health_monitor.h"
#include "router/instance.h"
#include "router/kv_event_subscriber.h"
#include "router/disconnect_watch.h"
#include "router/proxy.h"
#include "server/http_transport.h"

namespace strata::router {
namespace {

bool is_completion(const std::string& path) {
  return path == "/v1/completions" || path == "/v1/chat/completions";
}

void line(std::string& out, const std::string& name, const std::string& labels, int64_t value) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += " " + std::to_string(value) + "\n";
}

void head(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

struct Router::Impl {
  explicit Impl(RouterConfig c) : config(std::move(c)) {
    std::vector<Instance*> all;
    std::vector<KvEventSubscriber::Source> sources;
    for (const bool prefill : {false, true}) {
      for (const BackendSpec& b : prefill ? config.prefill_backends : config.backends) {
        instances.push_back(std::make_unique<Instance>(b, prefill, config.backend_timeout));
        all.push_back(instances.back().get());
        if (!b.events.empty()) sources.push_back({b.events, b.replay, &instances.back()->index});
        event_source_idx.push_back(b.events.empty() ? -1 : static_cast<int>(sources.size()) - 1);
      }
    }
    if (!sources.empty()) {
      subscriber = std::make_unique<KvEventSubscriber>(std::move(sources), config.replay_timeout);
    }
    monitor = std::make_unique<HealthMonitor>(std::move(all), config.poll_period);
  }

  // The request's prompt block hashes (wire form) for each block size the instances report;
  // empty when the request does not parse or no instance has reported one.
  std::map<int32_t, std::vector<uint64_t>> chains(const server::HttpRequest& req) const {
    std::map<int32_t, std::vector<uint64_t>> out;
    for (const auto& in : instances) {
      if (const int32_t bs = in->index.block_size(); bs > 0) out[bs];
    }
    if (out.empty()) return out;
    std::variant<server::CompletionRequest, server::ApiError> parsed =
        server::parse_request(req.body, config.model, req.path == "/v1/chat/completions");
    const auto* r = std::get_if<server::CompletionRequest>(&parsed);
    if (r == nullptr || r->prompts.empty()) return {};
    // An instance's tenant is the request's key; without the instances' secret, no tenant salt
    // can be predicted, and the request's own salt is the best guess.
    const std::string_view tenant =
        config.cache_salt_secret.empty() ? std::string_view() : req.bearer_key().value_or("");
    const kv::BlockExtraKeys extra{
        .cache_salt = kv::request_cache_salt(config.cache_salt_secret, tenant, r->cache_salt),
        .adapter_id = 0};
    const std::vector<int32_t>& prompt = r->prompts.front();
    kv::BlockHasher hasher;
    for (auto& [bs, chain] : out) {
      kv::BlockHash parent;
      for (size_t at = 0; at + static_cast<size_t>(bs) <= prompt.size(); at += bs) {
        const std::span<const int32_t> block(prompt.data() + at, static_cast<size_t>(bs));
        parent = hasher.hash(at == 0 ? nullptr : &parent, block, extra);
        chain.push_back(kv::wire_block_hash(parent));
      }
    }
    return out;
  }

  // Picks an instance of the prefill pool (prefill) or of the others (not `excluded`),
  // counting the decision when count; nullopt when none is healthy.
  std::optional<Choice> pick(const std::map<int32_t, std::vector<uint64_t>>& chain,
                             std::optional<size_t> excluded, Policy policy, bool prefill,
                             bool count, std::vector<int32_t>& matched) {
    std::vector<InstanceView> views(instances.size());
    matched.assign(instances.size(), 0);  // blocks the instance need not compute
    for (size_t i = 0; i < instances.size(); ++i) {
      const Instance& in = *instances[i];
      views[i].healthy = in.healthy && excluded != i && in.prefill == prefill;
      views[i].in_flight = in.in_flight;
      views[i].reported_load = in.reported_load;
      if (const auto c = chain.find(in.index.block_size()); c != chain.end()) {
        const PrefixMatch m = in.index.match(c->second);
        matched[i] = m.blocks();
        views[i].matched_blocks = m.device;
        views[i].matched_host_blocks = m.host;
        views[i].matched_disk_blocks = m.disk;
      }
    }
    const std::optional<Choice> c = choose_instance(policy, views, turn++, config.balance_factor);
    if (c && count) ++decisions[static_cast<size_t>(c->decision)];
    return c;
  }

  void handle(const server::HttpRequest& req, server::HttpResponder& res);
  // POST /reset_prefix_cache: every healthy instance's, in turn.
  void reset_prefix_caches(const server::HttpRequest& req, server::HttpResponder& res);
  std::optional<server::HttpResponse> quick(const server::HttpRequest& req);
  std::string render_metrics() const;

  RouterConfig config;
  std::vector<std::unique_ptr<Instance>> instances;
  std::vector<int> event_source_idx;  // per instance: its subscriber source, -1 = none
  std::unique_ptr<KvEventSubscriber> subscriber;
  std::unique_ptr<HealthMonitor> monitor;
  std::unique_ptr<DisconnectWatch> watch = std::make_unique<DisconnectWatch>(kWatchPeriod);
  static constexpr std::chrono::milliseconds kWatchPeriod{50};
  std::unique_ptr<server::HttpTransport> http;
  std::atomic<uint64_t> turn{0};
  std::array<std::atomic<int64_t>, std::size(kAllDecisions)> decisions{};
  std::atomic<int64_t> num_retries{0};
  std::atomic<int64_t> num_unrouted{0};  // no healthy instance
};

void Router::Impl::reset_prefix_caches(const server::HttpRequest& req,
                                       server::HttpResponder& res) {
  std::string refused;
  int worst = 200;
  for (const auto& in : instances) {
    if (!in->healthy) continue;
    const InstanceAnswer a = call_instance(in->connections, req);
    if (a.answered && a.status == 200) continue;
    const int status = a.answered ? a.status : 502;
    // A refusal of the request itself (a bad query) is every instance's: answer it as it came.
    if (a.answered && status >= 400 && status < 500 && status != 409) {
      res.send(status, "application/json", a.body);
      return;
    }
    worst = std::max(worst, status);
    refused += (refused.empty() ? "" : "; ") + in->spec.url + ": " +
               (a.answered ? std::to_string(a.status) + " " + a.body : a.error);
  }
  if (refused.empty()) {
    res.send(200, "text/plain", "");
    return;
  }
  res.send(worst, "application/json",
           router_error_json(worst, "not every instance reset its prefix cache (" + refused + ")"));
}

void Router::Impl::handle(const server::HttpRequest& req, server::HttpResponder& res) {
  if (req.method == "POST" && req.path == "/reset_prefix_cache") {
    reset_prefix_caches(req, res);
    return;
  }
  // Only completions follow --policy; the rest (models, tokenize) go where the load is least.
  const bool completion = req.method == "POST" && is_completion(req.path);
  const Policy policy = completion ? config.policy : Policy::kLeastLoad;
  const std::map<int32_t, std::vector<uint64_t>> chain =
      policy == Policy::kPrefix ? chains(req) : std::map<int32_t, std::vector<uint64_t>>{};
  // Disaggregated: the prompt's prefill instance by the policy, the request's decode instance
  // by load, told which prefill instance to use. No prefill instance healthy: the decode
  // instance is told none and uses its first, or computes the prompt itself when that fails.
  const bool pools = !config.prefill_backends.empty();
  server::HttpHeaders extra;
  Instance* prefill = nullptr;
  if (pools && completion) {
    std::vector<int32_t> matched;
    if (const std::optional<Choice> p = pick(chain, std::nullopt, policy, /*prefill=*/true,
                                             /*count=*/true, matched)) {
      prefill = instances[p->instance].get();
      ++prefill->num_routed;
      prefill->num_predicted_blocks += matched[p->instance];
      ++prefill->in_flight;
      extra.emplace_back(std::string(server::kPrefillHeader), prefill->spec.url);
    }
  }
  std::optional<size_t> failed;
  std::string why;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<int32_t> matched;
    const std::optional<Choice> c =
        pools ? pick({}, failed, Policy::kLeastLoad, /*prefill=*/false, /*count=*/!completion,
                     matched)
              : pick(chain, failed, policy, /*prefill=*/false, /*count=*/true, matched);
    if (!c) break;
    Instance& in = *instances[c->instance];
    ++in.num_routed;
    in.num_predicted_blocks += matched[c->instance];
    ++in.in_flight;
    std::string error;
    const ProxyOutcome o = forward_request(in.connections, req, res, *watch, extra, error);
    --in.in_flight;
    if (o == ProxyOutcome::kNoAnswer || o == ProxyOutcome::kCutMidStream ||
        o == ProxyOutcome::kCutMidBody) {
      ++in.num_failed;
      if (in.healthy.exchange(false)) {
        std::fprintf(stderr, "strata: route: %s failed (%s): taken out\n", in.spec.url.c_str(),
                     o == ProxyOutcome::kNoAnswer ? error.c_str() : "cut mid-answer");
      }
    }
    if (o != ProxyOutcome::kNoAnswer) {
      if (prefill != nullptr) --prefill->in_flight;
      return;
    }
    failed = c->instance;
    why = in.spec.url + ": " + error;
    if (attempt == 0) ++num_retries;
  }
  if (prefill != nullptr) --prefill->in_flight;
  ++num_unrouted;
  res.send(503, "application/json",
           router_error_json(503, why.empty() ? "no instance is healthy"
                                              : "no instance answered (last: " + why + ")"),
           {{"Retry-After", "1"}});
}

std::optional<server::HttpResponse> Router::Impl::quick(const server::HttpRequest& req) {
  if (req.method != "GET") return std::nullopt;
  if (req.path == "/health") {
    for (const auto& in : instances) {
      if (in->healthy) return server::HttpResponse{200, "text/plain", "", {}, false};
    }
    return server::HttpResponse{
        503, "application/json", router_error_json(503, "no instance is healthy"), {}, false};
  }
  if (req.path == "/metrics") {
    return server::HttpResponse{200, "text/plain; version=0.0.4", render_metrics(), {}, false};
  }
  return std::nullopt;
}

std::string Router::Impl::render_metrics() const {
  std::string out;
  const auto per_instance = [&](const char* name, const char* type, const char* help, auto value) {
    head(out, name, type, help);
    for (size_t i = 0; i < instances.size(); ++i) {
      line(out, name, "instance=\"" + instances[i]->spec.url + "\"", int64_t{value(i)});
    }
  };
  per_instance("strata:router_requests_total", "counter", "Requests sent to the instance.",
               [&](size_t i) { return instances[i]->num_routed.load(); });
  per_instance("strata:router_requests_in_flight", "gauge",
               "Requests sent to the instance and not finished.",
               [&](size_t i) { return instances[i]->in_flight.load(); });
  per_instance("strata:router_connections_opened_total", "counter",
               "Connections opened to the instance (the others were kept-alive ones reused).",
               [&](size_t i) { return instances[i]->connections.num_opened(); });
  per_instance("strata:router_connections_idle", "gauge",
               "Kept-alive connections to the instance waiting for a request.",
               [&](size_t i) { return static_cast<int64_t>(instances[i]->connections.num_idle()); });
  per_instance("strata:router_instance_healthy", "gauge", "1 while the instance takes requests.",
               [&](size_t i) { return instances[i]->healthy.load() ? 1 : 0; });
  per_instance("strata:router_instance_failures_total", "counter",
               "Requests the instance failed (unreachable or cut mid-answer).",
               [&](size_t i) { return instances[i]->num_failed.load(); });
  per_instance("strata:router_instance_reported_load", "gauge",
               "Running + waiting requests the instance's /metrics last reported.",
               [&](size_t i) { return instances[i]->reported_load.load(); });
  per_instance("strata:router_predicted_cached_blocks_total", "counter",
               "Prompt blocks the prefix index predicted cached on the instance it chose.",
               [&](size_t i) { return instances[i]->num_predicted_blocks.load(); });
  per_instance("strata:router_index_blocks", "gauge",
               "Blocks the instance's prefix index holds in its pool (from its KV events).",
               [&](size_t i) { return static_cast<int64_t>(instances[i]->index.num_blocks()); });
  const std::string tb = "strata:router_index_tier_blocks";
  head(out, tb, "gauge", "Blocks the instance's prefix index holds in a KV tier, by medium.");
  for (const auto& in : instances) {
    for (const kv::KvMedium m : {kv::KvMedium::kHost, kv::KvMedium::kDisk}) {
      line(out, tb,
           "instance=\"" + in->spec.url + "\",medium=\"" + std::string(kv::kv_medium_name(m)) +
               "\"",
           static_cast<int64_t>(in->index.num_blocks(m)));
    }
  }
  per_instance("strata:router_kv_event_batches_total", "counter",
               "KV event batches applied to the instance's prefix index.", [&](size_t i) {
                 const int s = event_source_idx[i];
                 return s < 0 ? int64_t{0} : subscriber->counters(s).num_batches.load();
               });
  per_instance("strata:router_kv_event_gaps_total", "counter",
               "Gaps in the instance's KV event sequence numbers.", [&](size_t i) {
                 const int s = event_source_idx[i];
                 return s < 0 ? int64_t{0} : subscriber->counters(s).num_gaps.load();
               });
  const std::string d = "strata:router_decisions_total";
  head(out, d, "counter", "Requests routed, by what decided their instance.");
  for (const Decision x : kAllDecisions) {
    line(out, d, "decision=\"" + std::string(decision_name(x)) + "\"",
         decisions[static_cast<size_t>(x)].load());
  }
  head(out, "strata:router_retries_total", "counter",
       "Requests tried again on another instance after the first failed before answering.");
  line(out, "strata:router_retries_total", "", num_retries.load());
  head(out, "strata:router_unrouted_total", "counter",
       "Requests answered 503: no instance healthy or none answered.");
  line(out, "strata:router_unrouted_total", "", num_unrouted.load());
  return out;
}

Router::Router(RouterConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  Impl& im = *impl_;
  im.http = std::make_unique<server::HttpTransport>(
      im.config.limits,
      [&im](const server::HttpRequest& req, server::HttpResponder& res) { im.handle(req, res); },
      [&im](const server::HttpRequest& req) { return im.quick(req); },
      [](int status, const std::string& message) {
        return server::HttpResponse{
            status, "application/json", router_error_json(status, message), {}, false};
      });
}

Router::~Router() = default;

bool Router::listen() {
  const Result<int> port = impl_->http->bind(impl_->config.host, impl_->config.port);
  if (!port.ok()) {
    std::fprintf(stderr, "strata: error: %s\n", port.status().message().c_str());
    return false;
  }
  const RouterConfig& c = impl_->config;
  const std::string what =
      c.prefill_backends.empty()
          ? std::to_string(c.backends.size()) + " instances"
          : std::to_string(c.prefill_backends.size()) + " prefill and " +
                std::to_string(c.backends.size()) + " decode instances";
  std::fprintf(stderr, "strata: routing to %s (%s) on http://%s:%d\n", what.c_str(),
               std::string(policy_name(c.policy)).c_str(), c.host.c_str(), port.value());
  impl_->http->run();
  return true;
}

void Router::shutdown() { impl_->http->stop(); }

}  // namespace strata::router
