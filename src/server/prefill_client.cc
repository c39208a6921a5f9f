#include "server/prefill_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <utility>
#include <variant>

#include "core/json_input.h"
#include "core/quote.h"

namespace strata::server {

void PrefillStop::stop() {
  const std::lock_guard lock(mu_);
  stopped_ = true;
  if (active_ != nullptr) active_->stop();
}

bool PrefillStop::stopped() const {
  const std::lock_guard lock(mu_);
  return stopped_;
}

bool PrefillStop::enter(httplib::Client* client) {
  const std::lock_guard lock(mu_);
  if (stopped_) return false;
  active_ = client;
  return true;
}

void PrefillStop::leave() {
  const std::lock_guard lock(mu_);
  active_ = nullptr;
}

PrefillClient::PrefillClient(std::string url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout) {}

Status PrefillClient::prefill(std::span<const int32_t> prompt, const std::string& cache_salt,
                              std::string_view authorization, PrefillStop* stop) const {
  nlohmann::json body = {{"prompt", std::vector<int32_t>(prompt.begin(), prompt.end())},
                         {"max_tokens", 1},
                         {"temperature", 0}};
  if (!cache_salt.empty()) body["cache_salt"] = cache_salt;
  httplib::Client client(url_);
  client.set_connection_timeout(timeout_);
  client.set_read_timeout(timeout_);
  client.set_write_timeout(timeout_);
  httplib::Headers headers;
  if (!authorization.empty()) headers.emplace("Authorization", std::string(authorization));
  if (stop != nullptr && !stop->enter(&client)) {
    return Status::Unavailable("the call to the prefill instance at " + url_ + " was stopped");
  }
  const httplib::Result r =
      client.Post("/v1/completions", headers, body.dump(), "application/json");
  if (stop != nullptr) {
    stop->leave();
    if (stop->stopped()) {
      return Status::Unavailable("the call to the prefill instance at " + url_ + " was stopped");
    }
  }
  if (!r) {
    return Status::Unavailable("the prefill instance at " + url_ +
                               " did not answer: " + httplib::to_string(r.error()));
  }
  if (r->status == 200) return Status::Ok();
  // Another instance's answer is outside input: bounded nesting, its message cut to one bounded
  // line.
  std::string message = "status " + std::to_string(r->status);
  const std::variant<nlohmann::json, JsonInputError> parsed =
      parse_json_input(r->body, kMaxFileJsonDepth);
  const nlohmann::json* e = std::get_if<nlohmann::json>(&parsed);
  if (e != nullptr && e->is_object() && e->contains("error") && (*e)["error"].is_object() &&
      (*e)["error"].contains("message") && (*e)["error"]["message"].is_string()) {
    message += ": " + one_line((*e)["error"]["message"].get<std::string>(), 200);
  }
  if (r->status >= 500) return Status::Unavailable("the prefill instance failed: " + message);
  return Status::InvalidArgument("the prefill instance refused the prompt: " + message);
}

}  // namespace strata::server
