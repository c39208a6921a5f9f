// The KV codec (kv/kv_codec.h) on real KV blocks beside zstd (docs/benchmarks.md, "The KV
// codec"): reads every block file of a disk-tier directory (a `strata serve --kv-disk-path DIR`
// run that wrote its blocks through), and for each scheme -- split with each segment's own
// codebook, split with codebooks calibrated per layer's K and V on the first tenth of the
// blocks, zstd at levels 1 and 3 -- encodes and decodes every block on one thread (into buffers
// allocated before the clock starts), checks each round trip bit for bit, and reports the
// compression ratio (raw bytes / stream bytes), the encode and decode rates (raw GB/s, medians of
// --repeats passes) and, for split, the ratio of each layer's K and V.
//
// Usage: strata_kv_codec_bench --dir DIR --dtype bfloat16|float16|... --layers L
//                              [--repeats N] [--json]

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "guarded_main.h"
#include "kv/kv_cache_dtype.h"
#include "kv/kv_codec.h"

namespace {

using Clock = std::chrono::steady_clock;
using strata::kv::KvCodecPlan;
using strata::kv::KvCodecScheme;

// A disk-tier block file's bytes (kv/disk_tier.h: header, token ids, a hole to 4096, bytes).
std::vector<std::byte> read_block(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char header[72];
  if (!in.read(header, sizeof(header)) || std::memcmp(header, "STRATAKV", 8) != 0) {
    throw std::runtime_error(file.string() + ": not a disk-tier block file");
  }
  uint32_t block_size;
  uint64_t block_bytes;
  std::memcpy(&block_size, header + 12, 4);
  std::memcpy(&block_bytes, header + 24, 8);
  const uint64_t offset = (72 + uint64_t{block_size} * 4 + 4095) / 4096 * 4096;
  std::vector<std::byte> bytes(block_bytes);
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(block_bytes))) {
    throw std::runtime_error(file.string() + ": truncated");
  }
  return bytes;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  std::string name;
  double ratio = 0;
  double encode_gbs = 0;
  double decode_gbs = 0;
  std::vector<double> segment_ratio = {};  // split: each layer's K, V
};

Result measure(const std::string& name, const std::vector<std::vector<std::byte>>& blocks,
               const KvCodecPlan& plan, int repeats) {
  Result r{.name = name};
  size_t raw = 0, coded = 0;
  std::vector<std::string> streams(blocks.size());
  std::vector<double> enc, dec;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = Clock::now();
    for (size_t b = 0; b < blocks.size(); ++b) {
      streams[b].clear();
      strata::kv::kv_encode(blocks[b], plan, streams[b]);
    }
    enc.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    std::vector<std::vector<std::byte>> out(blocks.size());
    for (size_t b = 0; b < blocks.size(); ++b) out[b].assign(blocks[b].size(), std::byte{0});
    const auto t1 = Clock::now();
    bool ok = true;
    for (size_t b = 0; b < blocks.size(); ++b) {
      ok &= strata::kv::kv_decode(std::as_bytes(std::span(streams[b].data(), streams[b].size())),
                                  out[b])
                .ok();
    }
    dec.push_back(std::chrono::duration<double>(Clock::now() - t1).count());
    for (size_t b = 0; b < blocks.size() && ok; ++b) {
      ok = std::memcmp(out[b].data(), blocks[b].data(), blocks[b].size()) == 0;
    }
    if (!ok) throw std::runtime_error(name + ": a block did not round-trip");
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    raw += blocks[b].size();
    coded += streams[b].size();
  }
  r.ratio = static_cast<double>(raw) / static_cast<double>(coded);
  r.encode_gbs = static_cast<double>(raw) / median(enc) / 1e9;
  r.decode_gbs = static_cast<double>(raw) / median(dec) / 1e9;
  return r;
}

int run(int argc, char** argv) {
  CLI::App app("The KV codec on real KV blocks beside zstd");
  std::string dir, dtype_name;
  int layers = 0, repeats = 5;
  bool json = false;
  app.add_option("--dir", dir, "a disk tier's directory")->required();
  app.add_option("--dtype", dtype_name, "the pool's KV dtype (--kv-cache-dtype name)")->required();
  app.add_option("--layers", layers, "the model's layers")->required()->check(CLI::Range(1, 1024));
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100));
  app.add_flag("--json", json);
  CLI11_PARSE(app, argc, argv);

  const std::optional<strata::KvCacheDType> kv = strata::parse_kv_cache_dtype(dtype_name);
  if (!kv) throw std::runtime_error("unknown --dtype " + dtype_name);
  const std::optional<strata::DType> pool = strata::kv::kv_pool_dtype(*kv);
  if (!pool) throw std::runtime_error("--dtype needs a stored element type");

  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".kvb") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no block files under " + dir);
  std::vector<std::vector<std::byte>> blocks;
  for (const auto& f : files) blocks.push_back(read_block(f));
  const size_t block_bytes = blocks[0].size();

  std::vector<Result> results;
  const std::optional<strata::kv::SplitFormat> split = strata::kv::split_format_of(*pool);
  if (split) {
    // Each layer's K and V a segment (kv_layout.h: the block is [layer][K, V][head][token][dim]).
    const size_t segment = block_bytes / (2 * static_cast<size_t>(layers));
    KvCodecPlan own{.scheme = KvCodecScheme::kSplit, .split = *split, .segment_bytes = segment};
    results.push_back(measure("split, each segment's own codebook", blocks, own, repeats));
    KvCodecPlan calibrated = own;
    std::vector<strata::kv::SymbolHistogram> hist(2 * static_cast<size_t>(layers));
    for (size_t b = 0; b < std::max<size_t>(1, blocks.size() / 10); ++b) {
      strata::kv::add_segment_histograms(*split, blocks[b], segment, hist);
    }
    for (const auto& h : hist) {
      calibrated.codebooks.push_back(strata::kv::codebook_from_histogram(h));
    }
    Result c = measure("split, codebooks calibrated per layer", blocks, calibrated, repeats);
    // Each segment's ratio with the calibrated codebooks, over every block.
    for (size_t s = 0; s < hist.size(); ++s) {
      KvCodecPlan one = calibrated;
      one.segment_bytes = 0;
      one.codebooks = {calibrated.codebooks[s]};
      size_t coded = 0;
      for (const auto& b : blocks) {
        std::string stream;
        strata::kv::kv_encode(std::span(b).subspan(s * segment, segment), one, stream);
        coded += stream.size();
      }
      c.segment_ratio.push_back(static_cast<double>(segment * blocks.size()) /
                                static_cast<double>(coded));
    }
    results.push_back(c);
  }
  for (const int level : {1, 3}) {
    results.push_back(measure("zstd -" + std::to_string(level), blocks,
                              KvCodecPlan{.scheme = KvCodecScheme::kZstd, .zstd_level = level},
                              repeats));
  }

  if (json) {
    nlohmann::json j = {{"blocks", blocks.size()},
                        {"block_bytes", block_bytes},
                        {"dtype", dtype_name},
                        {"layers", layers}};
    for (const Result& r : results) {
      j["schemes"].push_back({{"scheme", r.name},
                              {"ratio", r.ratio},
                              {"encode_gb_per_s", r.encode_gbs},
                              {"decode_gb_per_s", r.decode_gbs},
                              {"segment_ratio", r.segment_ratio}});
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%zu blocks of %zu bytes (%s, %d layers), one thread\n\n", blocks.size(), block_bytes,
              dtype_name.c_str(), layers);
  std::printf("| scheme | ratio | encode GB/s | decode GB/s |\n|---|---|---|---|\n");
  for (const Result& r : results) {
    std::printf("| %s | %.3f | %.2f | %.2f |\n", r.name.c_str(), r.ratio, r.encode_gbs,
                r.decode_gbs);
  }
  for (const Result& r : results) {
    if (r.segment_ratio.empty()) continue;
    std::printf("\n%s, by layer:\n\n| layer | K | V |\n|---|---|---|\n", r.name.c_str());
    for (int l = 0; l < layers; ++l) {
      std::printf("| %d | %.3f | %.3f |\n", l, r.segment_ratio[2 * static_cast<size_t>(l)],
                  r.segment_ratio[2 * static_cast<size_t>(l) + 1]);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_kv_codec_bench", run, argc, argv);
}
