#include "kv/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <utility>

namespace strata::kv {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

bool parse_int(std::string_view s, int& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string reply_text(const redisReply& r) {
  switch (r.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r.str, r.len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r.integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r.elements; ++i) {
        if (i > 0) out += '\n';
        out += reply_text(*r.element[i]);
      }
      return out;
    }
    default:
      return "";
  }
}

}  // namespace

Result<RedisEndpoint> parse_redis_url(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) {
    return Status::InvalidArgument("a Redis URL starts with redis:// (got '" + std::string(url) +
                                   "')");
  }
  std::string_view rest = url.substr(kScheme.size());
  RedisEndpoint ep;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!parse_int(db, ep.db) || ep.db < 0)) {
      return Status::InvalidArgument("the database in '" + std::string(url) +
                                     "' is not a number >= 0");
    }
    rest = rest.substr(0, slash);
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (!parse_int(rest.substr(colon + 1), ep.port) || ep.port < 1 || ep.port > 65535) {
      return Status::InvalidArgument("the port in '" + std::string(url) +
                                     "' is not a number in [1, 65535]");
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return Status::InvalidArgument("no host in '" + std::string(url) + "'");
  ep.host = std::string(rest);
  return ep;
}

void RedisClient::ContextFree::operator()(redisContext* c) const { redisFree(c); }

RedisClient::RedisClient(RedisEndpoint endpoint, RedisClientOptions options)
    : endpoint_(std::move(endpoint)), options_(options), backoff_(options.backoff) {}

RedisClient::~RedisClient() = default;

Status RedisClient::fail(const std::string& what) {
  ctx_.reset();
  ++num_failures_;
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  return Status::Unavailable("redis " + endpoint_.host + ":" + std::to_string(endpoint_.port) +
                             ": " + what);
}

Status RedisClient::ensure_connected() {
  if (ctx_) return Status::Ok();
  if (std::chrono::steady_clock::now() < retry_at_) {
    ++num_skipped_;
    return Status::Unavailable("redis " + endpoint_.host + ":" + std::to_string(endpoint_.port) +
                               ": not answering (retried later)");
  }
  const timeval tv = to_timeval(options_.timeout);
  ctx_.reset(redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, tv));
  if (!ctx_) return fail("cannot allocate a connection");
  if (ctx_->err != 0) return fail(ctx_->errstr);
  if (redisSetTimeout(ctx_.get(), tv) != REDIS_OK) return fail("cannot set the timeout");
  if (endpoint_.db != 0) {
    const std::string db = std::to_string(endpoint_.db);
    const std::string_view args[] = {"SELECT", db};
    void* raw = nullptr;
    STRATA_RETURN_IF_ERROR(round_trip(args, &raw));
    const Reply reply(static_cast<redisReply*>(raw));
    if (reply->type == REDIS_REPLY_ERROR) return fail("SELECT " + db + ": " + reply_text(*reply));
  }
  backoff_ = options_.backoff;
  return Status::Ok();
}

Status RedisClient::append(std::span<const std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(),
                             lens.data()) != REDIS_OK) {
    return fail("cannot queue a command");
  }
  return Status::Ok();
}

Status RedisClient::read_reply(void** reply) {
  *reply = nullptr;
  if (redisGetReply(ctx_.get(), reply) != REDIS_OK || *reply == nullptr) {
    return fail(ctx_->errstr[0] != '\0' ? ctx_->errstr : "no reply");
  }
  return Status::Ok();
}

Status RedisClient::round_trip(std::span<const std::string_view> args, void** reply) {
  STRATA_RETURN_IF_ERROR(append(args));
  return read_reply(reply);
}

Status RedisClient::mget(
    std::span<const std::string> keys,
    const std::function<void(size_t, std::optional<std::string_view>)>& each, size_t chunk) {
  if (keys.empty()) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ensure_connected());
  chunk = std::max<size_t>(chunk, 1);
  // At most kMgetWindow MGETs in flight: the next is sent as each reply is read, so neither side
  // holds more than a few replies (hundreds of MiB queued in the server's output buffer read at
  // a tenth of the rate).
  size_t sent = 0;
  const auto send = [&]() -> Status {
    const size_t n = std::min(chunk, keys.size() - sent);
    Command mget = {"MGET"};
    mget.insert(mget.end(), keys.begin() + static_cast<ptrdiff_t>(sent),
                keys.begin() + static_cast<ptrdiff_t>(sent + n));
    sent += n;
    return append(mget);
  };
  for (size_t w = 0; w < kMgetWindow && sent < keys.size(); ++w) STRATA_RETURN_IF_ERROR(send());
  Status error;
  for (size_t first = 0; first < keys.size(); first += chunk) {
    const size_t n = std::min(chunk, keys.size() - first);
    void* raw = nullptr;
    STRATA_RETURN_IF_ERROR(read_reply(&raw));
    const Reply reply(static_cast<redisReply*>(raw));
    if (sent < keys.size()) STRATA_RETURN_IF_ERROR(send());
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
      if (error.ok()) error = Status::Internal("redis MGET: " + reply_text(*reply));
      continue;  // the other replies are still read, so the connection stays in step
    }
    for (size_t i = 0; i < n && error.ok(); ++i) {
      const redisReply& e = *reply->element[i];
      each(first + i, e.type == REDIS_REPLY_STRING
                          ? std::optional<std::string_view>(std::string_view(e.str, e.len))
                          : std::nullopt);
    }
  }
  return error;
}

RedisClient::Command set_nx_command(const RedisKeyValue& kv, const std::string& ttl) {
  RedisClient::Command c = {"SET", kv.key, kv.value, "NX"};
  if (ttl != "0") {
    c.emplace_back("EX");
    c.emplace_back(ttl);
  }
  return c;
}

Result<std::vector<bool>> RedisClient::set_nx(std::span<const RedisKeyValue> pairs,
                                              int64_t ttl_seconds) {
  const std::string ttl = std::to_string(std::max<int64_t>(ttl_seconds, 0));
  std::vector<Command> commands;
  commands.reserve(pairs.size());
  for (const RedisKeyValue& kv : pairs) commands.push_back(set_nx_command(kv, ttl));
  std::vector<bool> written(pairs.size(), false);
  Status refused;
  STRATA_RETURN_IF_ERROR(pipeline(commands, [&](size_t i, const ReplyView& r) {
    if (r.kind == ReplyView::Kind::kError && refused.ok()) {
      refused = Status::Internal("redis SET: " + std::string(r.text));
    }
    written[i] = r.kind == ReplyView::Kind::kStatus;  // OK; nil when the key was there
  }));
  if (!refused.ok()) return refused;
  return written;
}

Status RedisClient::pipeline(std::span<const Command> commands,
                             const std::function<void(size_t, const ReplyView&)>& each,
                             size_t window) {
  if (commands.empty()) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ensure_connected());
  window = std::max<size_t>(window, 1);
  size_t sent = 0;
  const auto send = [&] { return append(commands[sent++]); };
  while (sent < commands.size() && sent < window) STRATA_RETURN_IF_ERROR(send());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    STRATA_RETURN_IF_ERROR(read_reply(&raw));
    const Reply reply(static_cast<redisReply*>(raw));
    if (sent < commands.size()) STRATA_RETURN_IF_ERROR(send());
    ReplyView v;
    switch (reply->type) {
      case REDIS_REPLY_STRING:
        v.kind = ReplyView::Kind::kString;
        break;
      case REDIS_REPLY_NIL:
        v.kind = ReplyView::Kind::kNil;
        break;
      case REDIS_REPLY_STATUS:
        v.kind = ReplyView::Kind::kStatus;
        break;
      case REDIS_REPLY_ERROR:
        v.kind = ReplyView::Kind::kError;
        break;
      case REDIS_REPLY_INTEGER:
        v.kind = ReplyView::Kind::kInteger;
        v.integer = reply->integer;
        break;
      default:
        break;
    }
    if (reply->str != nullptr) v.text = std::string_view(reply->str, reply->len);
    each(i, v);
  }
  return Status::Ok();
}

Result<std::vector<RedisSlotRange>> RedisClient::cluster_slots() {
  STRATA_RETURN_IF_ERROR(ensure_connected());
  const std::string_view args[] = {"CLUSTER", "SLOTS"};
  void* raw = nullptr;
  STRATA_RETURN_IF_ERROR(round_trip(args, &raw));
  const Reply reply(static_cast<redisReply*>(raw));
  if (reply->type != REDIS_REPLY_ARRAY) {
    return Status::Internal("redis CLUSTER SLOTS: " + reply_text(*reply));
  }
  std::vector<RedisSlotRange> out;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply& r = *reply->element[i];
    if (r.type != REDIS_REPLY_ARRAY || r.elements < 3 || r.element[2]->type != REDIS_REPLY_ARRAY ||
        r.element[2]->elements < 2) {
      return Status::Internal("redis CLUSTER SLOTS: an entry of another shape");
    }
    const redisReply& master = *r.element[2];
    RedisSlotRange range;
    range.start = static_cast<int>(r.element[0]->integer);
    range.end = static_cast<int>(r.element[1]->integer);
    range.master.host = master.element[0]->str != nullptr
                            ? std::string(master.element[0]->str, master.element[0]->len)
                            : std::string();
    if (range.master.host.empty()) range.master.host = endpoint_.host;
    range.master.port = static_cast<int>(master.element[1]->integer);
    out.push_back(std::move(range));
  }
  return out;
}

Result<std::string> RedisClient::command(std::span<const std::string_view> args) {
  STRATA_RETURN_IF_ERROR(ensure_connected());
  void* raw = nullptr;
  STRATA_RETURN_IF_ERROR(round_trip(args, &raw));
  const Reply reply(static_cast<redisReply*>(raw));
  if (reply->type == REDIS_REPLY_ERROR) return Status::Internal("redis: " + reply_text(*reply));
  return reply_text(*reply);
}

}  // namespace strata::kv
