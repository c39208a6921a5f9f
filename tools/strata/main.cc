// strata: the command-line entry point. Each subcommand lives in its own *_command.cc; this file
// parses the command line and is the one exception boundary: every error, strata::Error or any
// other exception, becomes one line on stderr ("strata: error: ...") and a non-zero exit.

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "bench_command.h"
#include "core/error.h"
#include "core/quote.h"
#include "eval_command.h"
#include "generate_command.h"
#include "plan_command.h"
#include "route_command.h"
#include "serve_command.h"
#include "tokenize_command.h"

namespace {

// Long enough for any message Strata writes; a message that quotes outside text is cut.
constexpr size_t kMaxErrorBytes = 4096;

// One line whatever the message holds: control characters (newlines) become '?', invalid UTF-8
// U+FFFD.
int report(std::string_view message) {
  std::fprintf(stderr, "strata: error: %s\n", strata::one_line(message, kMaxErrorBytes).c_str());
  return 1;
}

int run(CLI::App& app, int argc, char** argv) {
  strata::cli::GenerateOptions generate;
  strata::cli::add_generate_command(app, generate);
  strata::cli::PlanOptions plan;
  strata::cli::add_plan_command(app, plan);
  strata::cli::TokenizeOptions tokenize;
  strata::cli::add_tokenize_command(app, tokenize);
  strata::cli::DetokenizeOptions detokenize;
  strata::cli::add_detokenize_command(app, detokenize);
  strata::cli::EvalOptions eval;
  strata::cli::add_eval_command(app, eval);
  strata::cli::BenchOptions bench;
  strata::cli::add_bench_command(app, bench);
  strata::cli::ServeOptions serve;
  strata::cli::add_serve_command(app, serve);
  strata::cli::RouteOptions route;
  strata::cli::add_route_command(app, route);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // --help and --version exit 0; usage errors are one line (below)
  }
  if (app.got_subcommand("generate")) return strata::cli::run_generate(generate);
  if (app.got_subcommand("plan")) return strata::cli::run_plan(plan);
  if (app.got_subcommand("tokenize")) return strata::cli::run_tokenize(tokenize);
  if (app.got_subcommand("detokenize")) return strata::cli::run_detokenize(detokenize);
  if (app.got_subcommand("eval")) return strata::cli::run_eval(eval);
  if (app.got_subcommand("bench")) return strata::cli::run_bench(bench);
  if (app.got_subcommand("serve")) return strata::cli::run_serve(serve);
  if (app.got_subcommand("route")) return strata::cli::run_route(route);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A write to a socket whose peer has gone is an error where it happens (EPIPE), never the end
  // of the process: Debian's cpp-httplib sends without MSG_NOSIGNAL (strata bench --endpoint,
  // strata route, a decode instance's prefill client) and hiredis writes with write(), so one
  // server closing a connection (a dead instance, one at its connection limit, a Redis killed
  // mid-run) would otherwise kill the client with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"Strata: an LLM inference engine built around the KV cache", "strata"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata 0.1.0");
  // Usage errors are one line too, like every other error.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "strata: error: " + strata::one_line(e.what(), kMaxErrorBytes) + " (see --help)\n";
  });
  try {
    return run(app, argc, argv);
  } catch (const strata::Error& e) {
    return report(e.what());
  } catch (const std::bad_alloc&) {
    return report("out of memory");
  } catch (const std::exception& e) {
    // A library's exception (std::filesystem, nlohmann, the standard streams) that no check
    // turned into a strata::Error: still one line, never an abort.
    return report(e.what());
  } catch (...) {
    return report("unexpected error (an exception that is not a std::exception)");
  }
}
