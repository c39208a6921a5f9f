// PrefillClient against a real HTTP server standing in for a prefill instance: a call it answers
// is Ok, a refusal is InvalidArgument with its message, and a call it never answers is stopped
// from another thread at once (a decode instance's handler whose client went away), not after
// the call's timeout.

#include "server/prefill_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::server {
namespace {

using namespace std::chrono_literals;

// A prefill instance that answers 200, refuses with 400, or holds the call until released.
class FakePrefill {
 public:
  FakePrefill() {
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.body.find("\"prompt\":[9]") != std::string::npos) {
        res.status = 400;
        res.set_content(R"({"error":{"message":"too long for me"}})", "application/json");
        return;
      }
      if (req.body.find("\"prompt\":[7]") != std::string::npos) {
        std::unique_lock lock(mu_);
        ++held_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return released_; });
      }
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FakePrefill() {
    release();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void wait_held() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return held_ > 0; });
  }
  void release() {
    const std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool released_ = false;
};

TEST(PrefillClientTest, AnsweredRefusedAndAStalledCallStoppedAtOnce) {
  FakePrefill instance;
  const PrefillClient client(instance.url(), 30s);
  const std::vector<int32_t> ok{1, 2}, refused{9}, stalls{7};
  EXPECT_TRUE(client.prefill(ok, "", "").ok());
  const Status r = client.prefill(refused, "", "");
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.message().find("too long for me"), std::string::npos) << r.message();

  PrefillStop stop;
  Status stalled;
  std::chrono::steady_clock::duration took{};
  std::thread call([&] {
    const auto t0 = std::chrono::steady_clock::now();
    stalled = client.prefill(stalls, "", "", &stop);
    took = std::chrono::steady_clock::now() - t0;
  });
  instance.wait_held();
  std::this_thread::sleep_for(50ms);
  stop.stop();
  call.join();
  EXPECT_EQ(stalled.code(), StatusCode::kUnavailable) << stalled.message();
  EXPECT_LT(took, 5s) << "the stopped call waited for its timeout";
  // Stopped before it starts: no call at all.
  EXPECT_EQ(client.prefill(ok, "", "", &stop).code(), StatusCode::kUnavailable);
  PrefillStop fresh;
  EXPECT_TRUE(client.prefill(ok, "", "", &fresh).ok());
}

}  // namespace
}  // namespace strata::server
