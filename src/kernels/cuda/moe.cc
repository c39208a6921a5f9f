// moe_experts_forward() (moe.h): the experts' half of the MoE layer as four launches on one
// stream, over a caller-owned workspace carved into 256-byte aligned pieces.

#include <cstdint>

#include "kernels/cuda/moe.h"

namespace strata::cuda {
namespace {

constexpr int64_t kAlign = 256;

int64_t round_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The workspace's pieces for up to max_tokens tokens.
struct Layout {
  int64_t offsets = 0, row_of = 0, token_of = 0, tile_expert = 0, tile_row = 0, num_tiles = 0;
  int64_t act = 0, y = 0, total = 0;
};

Layout layout(int64_t max_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
              int32_t inter) {
  const int64_t pairs = max_tokens * top_k;
  // The small tiles need the most table entries.
  const int64_t max_tiles = moe_max_tiles(max_tokens, top_k, num_experts, MoeTileConfig::kSmall);
  Layout l;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t here = at;
    at += round_up(bytes);
    return here;
  };
  l.offsets = take(4 * (int64_t{num_experts} + 1));
  l.row_of = take(4 * pairs);
  l.token_of = take(4 * pairs);
  l.tile_expert = take(4 * max_tiles);
  l.tile_row = take(4 * max_tiles);
  l.num_tiles = take(4);
  l.act = take(2 * pairs * inter);
  l.y = take(4 * pairs * hidden);
  l.total = at;
  return l;
}

}  // namespace

int64_t moe_workspace_bytes(int64_t max_tokens, int32_t top_k, int32_t num_experts, int32_t hidden,
                            int32_t inter) {
  return layout(max_tokens, top_k, num_experts, hidden, inter).total;
}

Status moe_experts_forward(const MoeExpertsParams& p, void* workspace, int64_t workspace_bytes,
                           cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden <= 0 || p.inter <= 0 || p.hidden % 8 != 0 || p.inter % 8 != 0) {
    return Status::InvalidArgument("moe_experts_forward: hidden and inter must be multiples of 8");
  }
  const Layout l = layout(p.num_tokens, p.top_k, p.num_experts, p.hidden, p.inter);
  if (workspace == nullptr || workspace_bytes < l.total) {
    return Status::InvalidArgument("moe_experts_forward: workspace below moe_workspace_bytes()");
  }
  if (p.num_tokens == 0) return Status::Ok();
  auto* base = static_cast<unsigned char*>(workspace);
  auto* offsets = reinterpret_cast<int32_t*>(base + l.offsets);
  auto* row_of = reinterpret_cast<int32_t*>(base + l.row_of);
  auto* token_of = reinterpret_cast<int32_t*>(base + l.token_of);
  auto* tile_expert = reinterpret_cast<int32_t*>(base + l.tile_expert);
  auto* tile_row = reinterpret_cast<int32_t*>(base + l.tile_row);
  auto* num_tiles = reinterpret_cast<int32_t*>(base + l.num_tiles);
  void* act = base + l.act;
  void* y = base + l.y;
  const MoeTileConfig config = p.force_tile_config
                                   ? p.tile_config
                                   : moe_choose_tile_config(p.num_tokens, p.top_k, p.num_experts);
  const int32_t max_tiles = moe_max_tiles(p.num_tokens, p.top_k, p.num_experts, config);

  MoePermuteParams perm;
  perm.experts = p.experts;
  perm.num_tokens = p.num_tokens;
  perm.top_k = p.top_k;
  perm.num_experts = p.num_experts;
  perm.expert_offsets = offsets;
  perm.row_of = row_of;
  perm.token_of = token_of;
  perm.tile_config = config;
  perm.max_tiles = max_tiles;
  perm.tile_expert = tile_expert;
  perm.tile_row = tile_row;
  perm.num_tiles = num_tiles;
  STRATA_RETURN_IF_ERROR(moe_permute(perm, stream));

  MoeGemmParams up;
  up.a = p.x;
  up.a_row_of = token_of;
  up.lda = p.hidden;
  up.w = p.w_gate_up;
  up.ldw = p.hidden;
  up.w_expert_stride = int64_t{2} * p.inter * p.hidden;
  up.d = act;
  up.ldd = p.inter;
  up.d_dtype = DType::kBF16;
  up.n = 2 * p.inter;
  up.k = p.hidden;
  up.epilogue = MoeGemmEpilogue::kSiluAndMul;
  up.expert_offsets = offsets;
  up.tile_expert = tile_expert;
  up.tile_row = tile_row;
  up.num_tiles = num_tiles;
  up.max_tiles = max_tiles;
  up.tile_config = config;
  STRATA_RETURN_IF_ERROR(moe_grouped_gemm(up, stream));

  MoeGemmParams down = up;
  down.a = act;
  down.a_row_of = nullptr;
  down.lda = p.inter;
  down.w = p.w_down;
  down.ldw = p.inter;
  down.w_expert_stride = int64_t{p.hidden} * p.inter;
  down.d = y;
  down.ldd = p.hidden;
  down.d_dtype = p.y_dtype;
  down.n = p.hidden;
  down.k = p.inter;
  down.epilogue = MoeGemmEpilogue::kNone;
  STRATA_RETURN_IF_ERROR(moe_grouped_gemm(down, stream));

  MoeCombineParams combine;
  combine.y = y;
  combine.y_dtype = p.y_dtype;
  combine.row_of = row_of;
  combine.weights = p.weights;
  combine.out = p.out;
  combine.ldo = p.hidden;
  combine.out_dtype = p.out_dtype;
  combine.accumulate = p.accumulate;
  combine.num_tokens = p.num_tokens;
  combine.top_k = p.top_k;
  combine.hidden = p.hidden;
  return moe_combine(combine, stream);
}

}  // namespace strata::cuda
