#include "kv/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <cstring>

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

// MGET replies read without reply objects: hiredis hands each value to these functions as a view
// into its read buffer, and they pass it straight to the caller's each(). hiredis's own reply
// objects copy every value into a fresh allocation, and freeing a reply of megabytes gives the
// pages back to the system, so the next one faulted them in again: a third of a read's time.
struct MgetSink {
  const std::function<void(size_t, std::optional<std::string_view>)>* each = nullptr;
  size_t first = 0;     // the key index of the reply's first element
  size_t expected = 0;  // keys the MGET asked for
  bool deliver = false; // the reply is an array of `expected` elements
  std::string error;    // what the reply was instead
};

MgetSink& sink_of(const redisReadTask* task) { return *static_cast<MgetSink*>(task->privdata); }
// Every "object" is this marker: nothing is allocated, so there is nothing to free.
char kViewMarker;

void* view_string(const redisReadTask* task, char* str, size_t len) {
  MgetSink& sink = sink_of(task);
  if (task->parent == nullptr) {
    sink.error = "redis MGET: " + std::string(str, len);
  } else if (sink.deliver && task->type == REDIS_REPLY_STRING) {
    (*sink.each)(sink.first + static_cast<size_t>(task->idx), std::string_view(str, len));
  }
  return &kViewMarker;
}
void* view_array(const redisReadTask* task, int elements) {
  MgetSink& sink = sink_of(task);
  if (task->parent == nullptr && elements >= 0 && static_cast<size_t>(elements) == sink.expected) {
    sink.deliver = true;
  } else if (sink.error.empty()) {
    sink.error = "redis MGET: an array of " + std::to_string(elements) + " elements for " +
                 std::to_string(sink.expected) + " keys";
  }
  return &kViewMarker;
}
void* view_integer(const redisReadTask* task, long long /*value*/) {
  MgetSink& sink = sink_of(task);
  if (sink.error.empty()) sink.error = "redis MGET: an integer reply";
  return &kViewMarker;
}
void* view_nil(const redisReadTask* task) {
  MgetSink& sink = sink_of(task);
  if (task->parent != nullptr && sink.deliver) {
    (*sink.each)(sink.first + static_cast<size_t>(task->idx), std::nullopt);
  } else if (task->parent == nullptr && sink.error.empty()) {
    sink.error = "redis MGET: a nil reply";
  }
  return &kViewMarker;
}
void view_free(void* /*object*/) {}

redisReplyObjectFunctions kMgetViews = {view_string, view_array, view_integer, view_nil,
                                        view_free};

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
  // hiredis frees its read buffer whenever it is empty and larger than maxbuf (16 KiB), so each
  // reply of blocks grew it again from nothing; kept instead (as redis-benchmark does).
  ctx_->reader->maxbuf = 0;
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
  // The replies' values go to each() as hiredis parses them (kMgetViews); the reader's own
  // functions come back when the replies are read, or with a new connection after a failure.
  MgetSink sink;
  sink.each = &each;
  redisReader* reader = ctx_->reader;
  redisReplyObjectFunctions* const own = reader->fn;
  reader->fn = &kMgetViews;
  reader->privdata = &sink;
  Status error;
  for (size_t first = 0; first < keys.size(); first += chunk) {
    sink.first = first;
    sink.expected = std::min(chunk, keys.size() - first);
    sink.deliver = false;
    sink.error.clear();
    void* marker = nullptr;
    STRATA_RETURN_IF_ERROR(read_reply(&marker));  // a failure drops the connection and its reader
    if (sent < keys.size()) STRATA_RETURN_IF_ERROR(send());
    // The other replies are still read after an error reply, so the connection stays in step.
    if (!sink.error.empty() && error.ok()) error = Status::Internal(sink.error);
  }
  reader->fn = own;
  reader->privdata = nullptr;
  return error;
}

Status RedisClient::exists(std::span<const std::string> keys,
                           const std::function<void(size_t, bool)>& each) {
  std::vector<Command> commands;
  commands.reserve(keys.size());
  for (const std::string& k : keys) commands.push_back({"EXISTS", k});
  Status refused;
  const Status s = pipeline(
      commands, [&](size_t i, const ReplyView& r) { take_exists_reply(i, r, each, refused); });
  return s.ok() ? refused : s;
}

void take_exists_reply(size_t i, const RedisClient::ReplyView& r,
                       const std::function<void(size_t, bool)>& each, Status& refused) {
  if (r.kind == RedisClient::ReplyView::Kind::kInteger) {
    each(i, r.integer > 0);
  } else if (refused.ok()) {
    refused = Status::Internal("redis EXISTS: " + std::string(r.text));
  }
}

RedisClient::Command set_nx_command(const RedisKeyValue& kv, const std::string& ttl) {
  RedisClient::Command c = {"SET", kv.key, kv.value, "NX"};
  if (ttl != "0") {
    c.emplace_back("EX");
    c.emplace_back(ttl);
  }
  return c;
}

Status RedisClient::set_nx(std::span<const RedisKeyValue> pairs, int64_t ttl_seconds,
                           const std::function<void(size_t, bool)>& written) {
  if (pairs.empty()) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ensure_connected());
  // Each command's RESP around its value, which goes out from the caller's memory (hiredis would
  // copy each value twice, into a formatted command and into its output buffer, and free that
  // buffer after each round trip, so the next one faulted its pages in again).
  const std::string ttl = std::to_string(std::max<int64_t>(ttl_seconds, 0));
  std::string tail = "\r\n$2\r\nNX\r\n";
  if (ttl != "0") tail += "$2\r\nEX\r\n$" + std::to_string(ttl.size()) + "\r\n" + ttl + "\r\n";
  const char* const count = ttl != "0" ? "*6\r\n" : "*4\r\n";
  std::vector<std::string> heads;
  heads.reserve(pairs.size());
  std::vector<iovec> iov;
  iov.reserve(pairs.size() * 3);
  for (const RedisKeyValue& kv : pairs) {
    heads.push_back(std::string(count) + "$3\r\nSET\r\n$" + std::to_string(kv.key.size()) +
                    "\r\n" + std::string(kv.key) + "\r\n$" + std::to_string(kv.value.size()) +
                    "\r\n");
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    iov.push_back({heads[i].data(), heads[i].size()});
    iov.push_back({const_cast<char*>(pairs[i].value.data()), pairs[i].value.size()});
    iov.push_back({tail.data(), tail.size()});
  }
  STRATA_RETURN_IF_ERROR(send_all(iov));
  Status refused;
  for (size_t i = 0; i < pairs.size(); ++i) {
    void* raw = nullptr;
    STRATA_RETURN_IF_ERROR(read_reply(&raw));
    const Reply reply(static_cast<redisReply*>(raw));
    if (reply->type == REDIS_REPLY_ERROR) {
      if (refused.ok()) refused = Status::Internal("redis SET: " + reply_text(*reply));
      continue;
    }
    written(i, reply->type == REDIS_REPLY_STATUS);  // OK; nil when the key was there
  }
  return refused;
}

Status RedisClient::send_all(std::span<iovec> iov) {
  // What hiredis has queued goes first, so the commands stay in order.
  for (int done = 0; done == 0;) {
    if (redisBufferWrite(ctx_.get(), &done) != REDIS_OK) return fail(ctx_->errstr);
  }
  // The socket's send timeout (redisSetTimeout) bounds each sendmsg; MSG_NOSIGNAL: a server that
  // went away is an error here, not a SIGPIPE.
  while (!iov.empty()) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = std::min<size_t>(iov.size(), IOV_MAX);
    const ssize_t n = ::sendmsg(ctx_->fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno == EAGAIN || errno == EWOULDBLOCK ? "write timed out"
                                                          : std::string("write: ") + strerror(errno));
    }
    auto left = static_cast<size_t>(n);
    while (!iov.empty() && left >= iov.front().iov_len) {
      left -= iov.front().iov_len;
      iov = iov.subspan(1);
    }
    if (left > 0) {
      iov.front().iov_base = static_cast<char*>(iov.front().iov_base) + left;
      iov.front().iov_len -= left;
    }
  }
  return Status::Ok();
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
