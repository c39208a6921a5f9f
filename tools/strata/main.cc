// strata: the command-line entry point. Each subcommand lives in its own *_command.cc; this file
// parses the command line and turns every error into one line on stderr and a non-zero exit.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "bench_command.h"
#include "core/error.h"
#include "eval_command.h"
#include "generate_command.h"
#include "plan_command.h"
#include "serve_command.h"
#include "tokenize_command.h"

int main(int argc, char** argv) {
  CLI::App app{"Strata: an LLM inference engine built around the KV cache", "strata"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata 0.1.0");
  // Usage errors are one line too, like every other error.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "strata: error: " + std::string(e.what()) + " (see --help)\n";
  });
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("generate")) return strata::cli::run_generate(generate);
    if (app.got_subcommand("plan")) return strata::cli::run_plan(plan);
    if (app.got_subcommand("tokenize")) return strata::cli::run_tokenize(tokenize);
    if (app.got_subcommand("detokenize")) return strata::cli::run_detokenize(detokenize);
    if (app.got_subcommand("eval")) return strata::cli::run_eval(eval);
    if (app.got_subcommand("bench")) return strata::cli::run_bench(bench);
    if (app.got_subcommand("serve")) return strata::cli::run_serve(serve);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata: error: out of memory\n");
    return 1;
  }
  return 0;
}
