#pragma once
// PrefillClient: a decode instance's calls to its prefill instance (`strata serve --role decode
// --prefill-url URL`, docs/kv.md "Disaggregation"). Each prompt goes to the prefill instance as
// an ordinary completion of one token -- token ids, the client's cache salt, its API key -- so
// the prefill instance computes the prompt's KV and keeps its blocks for the decode instance to
// read; prefill() returns when that request is done. The decode instance queues the prompt
// itself as the call starts: its KV tiers read the blocks it lacks from the prefill instance as
// they are computed, and compute whatever did not come (the whole prompt, when the prefill
// instance failed or did not answer).
//
// Thread-safe: every call makes its own connection (a handler thread per request).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace httplib {
class Client;
}

namespace strata::server {

// Stops a client's calls from another thread: the handler whose client went away stops its
// prefill call rather than wait for it (up to --prefill-timeout). A call under way returns
// Unavailable at once (its connection is shut, and the prefill instance, seeing its client gone,
// cancels the prompt); a call made after stop() returns Unavailable without connecting.
// Thread-safe.
class PrefillStop {
 public:
  void stop();
  bool stopped() const;

 private:
  friend class PrefillClient;
  // The call under way registers its HTTP client here; false when already stopped.
  bool enter(httplib::Client* client);
  void leave();

  mutable std::mutex mu_;  // guards what follows
  bool stopped_ = false;
  httplib::Client* active_ = nullptr;
};

class PrefillClient {
 public:
  // url: the prefill instance's http://HOST:PORT; timeout bounds each call.
  PrefillClient(std::string url, std::chrono::milliseconds timeout);

  // Ok once the prefill instance has computed prompt under cache_salt (and authorization, the
  // client's "Bearer KEY" header or empty); Unavailable when it could not be reached or did not
  // answer in time, InvalidArgument with its error message when it refused the request.
  Status prefill(std::span<const int32_t> prompt, const std::string& cache_salt,
                 std::string_view authorization, PrefillStop* stop = nullptr) const;

  const std::string& url() const { return url_; }

 private:
  std::string url_;
  std::chrono::milliseconds timeout_;
};

}  // namespace strata::server
