#include "kv/kv_layout.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "kv/kv_accounting.h"

namespace strata::kv {
namespace {

// Llama-3-8B's KV shape: 32 layers, 8 KV heads (GQA), head_dim 128.
constexpr KvSpec kLlama8B{32, 8, 128, DType::kBF16};

TEST(KvSpecTest, BytesPerTokenIsTwoTimesLayersHeadsDimElementSize) {
  EXPECT_EQ(kLlama8B.bytes_per_token(), 2 * 32 * 8 * 128 * 2);  // 128 KiB
  EXPECT_EQ((KvSpec{32, 8, 128, DType::kF32}).bytes_per_token(), 262144);
  EXPECT_EQ((KvSpec{32, 8, 128, DType::kF8E4M3}).bytes_per_token(), 65536);
  EXPECT_EQ((KvSpec{24, 1, 64, DType::kF16}).bytes_per_token(), 2 * 24 * 1 * 64 * 2);  // MQA
  EXPECT_EQ((KvSpec{1, 1, 1, DType::kF32}).bytes_per_token(), 8);
  EXPECT_EQ(KvSpec{}.bytes_per_token(), 0);
}

TEST(KvSpecTest, BytesPerTokenDoesNotOverflowInt32) {
  // 2 x 128 x 128 x 512 x 4 = 64 MiB per token: every factor fits in int32, the product does not
  // once multiplied by a block.
  const KvSpec big{128, 128, 512, DType::kF32};
  EXPECT_EQ(big.bytes_per_token(), int64_t{2} * 128 * 128 * 512 * 4);
  const KvLayout layout(big, 128);
  EXPECT_EQ(layout.block_bytes(), int64_t{2} * 128 * 128 * 512 * 4 * 128);
  EXPECT_EQ(layout.pool_bytes(1000), int64_t{2} * 128 * 128 * 512 * 4 * 128 * 1000);
}

TEST(KvLayoutTest, SizesOfTheLlama8BLayout) {
  const KvLayout layout(kLlama8B, 16);
  EXPECT_EQ(layout.block_size(), 16);
  EXPECT_EQ(layout.spec().num_layers, 32);
  EXPECT_EQ(layout.head_elems(), 16 * 128);
  EXPECT_EQ(layout.kv_area_bytes(), 8 * 16 * 128 * 2);  // 32 KiB: one layer's K of a block
  EXPECT_EQ(layout.layer_bytes(), 2 * 32768);
  EXPECT_EQ(layout.block_bytes(), 32 * 65536);  // 2 MiB
  EXPECT_EQ(layout.pool_bytes(0), 0);
  EXPECT_EQ(layout.pool_bytes(1000), int64_t{1000} * 2 * 1024 * 1024);
}

TEST(KvLayoutTest, BlockBytesIsBytesPerTokenTimesBlockSize) {
  const std::vector<KvSpec> specs = {
      kLlama8B,
      {1, 1, 8, DType::kF32},
      {2, 4, 64, DType::kF16},
      {28, 2, 128, DType::kF8E5M2},
      {3, 5, 24, DType::kF32},
  };
  for (const KvSpec& spec : specs) {
    for (const int32_t bs : {8, 16, 32, 64, 128}) {
      const KvLayout layout(spec, bs);
      EXPECT_EQ(layout.block_bytes(), spec.bytes_per_token() * bs)
          << spec.num_layers << "x" << spec.num_kv_heads << "x" << spec.head_dim << " bs " << bs;
      EXPECT_EQ(layout.pool_bytes(7), 7 * layout.block_bytes());
    }
  }
}

TEST(KvLayoutTest, KAndVOffsetsInsideABlock) {
  const KvLayout layout({4, 2, 8, DType::kF16}, 16);
  const int64_t area = 2 * 16 * 8 * 2;  // 512 bytes
  ASSERT_EQ(layout.kv_area_bytes(), area);
  for (int32_t l = 0; l < 4; ++l) {
    EXPECT_EQ(layout.k_offset_bytes(l), l * 2 * area);
    EXPECT_EQ(layout.v_offset_bytes(l), l * 2 * area + area);
  }
  EXPECT_EQ(layout.v_offset_bytes(3) + area, layout.block_bytes()) << "layer 3's V ends the block";
}

TEST(KvLayoutTest, LayerViewStridesAndPointers) {
  struct Case {
    KvSpec spec;
    int32_t block_size;
  };
  const std::vector<Case> cases = {
      {kLlama8B, 16},
      {{2, 4, 64, DType::kF32}, 8},
      {{3, 1, 128, DType::kF16}, 128},
      {{5, 3, 16, DType::kF8E4M3}, 32},
  };
  for (const Case& c : cases) {
    const KvLayout layout(c.spec, c.block_size);
    const int64_t elem = dtype_size(c.spec.dtype);
    std::vector<std::byte> block(static_cast<size_t>(layout.block_bytes()));
    std::byte* base = block.data();
    for (int32_t l = 0; l < c.spec.num_layers; ++l) {
      const PagedKvCacheView view = layout.layer_view(base, l);
      SCOPED_TRACE(testing::Message() << "layers " << c.spec.num_layers << " layer " << l);
      EXPECT_EQ(view.k_data, base + layout.k_offset_bytes(l));
      EXPECT_EQ(view.v_data, base + layout.v_offset_bytes(l));
      EXPECT_EQ(view.block_stride * elem, layout.block_bytes());
      EXPECT_EQ(view.head_stride, static_cast<int64_t>(c.block_size) * c.spec.head_dim);
      EXPECT_EQ(view.token_stride, c.spec.head_dim);
      EXPECT_EQ(view.num_kv_heads, c.spec.num_kv_heads);
      EXPECT_EQ(view.head_dim, c.spec.head_dim);
      EXPECT_EQ(view.block_size, c.block_size);
      EXPECT_EQ(view.dtype, c.spec.dtype);
    }
  }
}

TEST(KvLayoutTest, LayerAreasAreSixteenByteAlignedWhenAHeadRowIs) {
  for (const KvSpec& spec : {KvSpec{4, 8, 128, DType::kBF16}, KvSpec{3, 1, 16, DType::kF8E4M3},
                             KvSpec{2, 3, 4, DType::kF32}}) {
    ASSERT_EQ(spec.head_dim * dtype_size(spec.dtype) % 16, 0);
    for (const int32_t bs : {8, 16, 32, 64, 128}) {
      const KvLayout layout(spec, bs);
      for (int32_t l = 0; l < spec.num_layers; ++l) {
        EXPECT_EQ(layout.k_offset_bytes(l) % 16, 0);
        EXPECT_EQ(layout.v_offset_bytes(l) % 16, 0);
      }
      EXPECT_EQ(layout.block_bytes() % 16, 0);
    }
  }
}

// An I4 layer of expect_addresses_tile_the_pool: its code bytes (strides in bytes, channels c and
// c + 1 sharing byte c / 2) and its four statistics arrays, by the documented formula.
void expect_int4_layer_tiles(const KvSpec& spec, const KvLayout& layout,
                             const PagedKvCacheView& view, std::byte* base, int64_t start,
                             int32_t num_blocks, std::vector<int>& covered,
                             int64_t* num_element_bytes, int64_t* num_scale_bytes) {
  const int64_t h_n = spec.num_kv_heads;
  const int64_t d = spec.head_dim;
  const int64_t bs = layout.block_size();
  const int64_t area = h_n * bs * d / 2;
  ASSERT_EQ(view.block_stride, layout.block_bytes());
  ASSERT_EQ(view.token_stride, d / 2);
  for (int32_t b = 0; b < num_blocks; ++b) {
    const int64_t block = b * layout.block_bytes() + start;
    for (int kv = 0; kv < 2; ++kv) {
      void* data = kv == 0 ? view.k_data : view.v_data;
      for (int32_t h = 0; h < h_n; ++h) {
        for (int32_t t = 0; t < bs; ++t) {
          for (int32_t c = 0; c < d; c += 2) {
            const int64_t byte =
                static_cast<std::byte*>(data) - base + view.offset(b, h, t) + c / 2;
            ASSERT_EQ(byte, block + kv * area + ((h * bs + t) * d + c) / 2);
            ++covered[static_cast<size_t>(byte)];
            ++*num_element_bytes;
          }
        }
      }
    }
    // K scale [H][D], K zero [H][D], V scale [H][B], V zero [H][B], fp16, after the V codes.
    const int64_t stats = block + 2 * area;
    const auto fp16_at = [&](void* data, int64_t index, int64_t expected) {
      const int64_t byte = static_cast<std::byte*>(data) - base + index * 2;
      ASSERT_EQ(byte, expected);
      ++covered[static_cast<size_t>(byte)];
      ++covered[static_cast<size_t>(byte + 1)];
      *num_scale_bytes += 2;
    };
    for (int32_t h = 0; h < h_n; ++h) {
      for (int32_t c = 0; c < d; ++c) {
        const int64_t at = b * view.scale_block_stride + h * view.k_stat_head_stride + c;
        fp16_at(view.k_scale_data, at, stats + (h * d + c) * 2);
        fp16_at(view.k_zero_data, at, stats + 2 * h_n * d + (h * d + c) * 2);
      }
      for (int32_t t = 0; t < bs; ++t) {
        const int64_t at = view.scale_offset(b, h, t);
        fp16_at(view.v_scale_data, at, stats + 4 * h_n * d + (h * bs + t) * 2);
        fp16_at(view.v_zero_data, at, stats + 4 * h_n * d + 2 * h_n * bs + (h * bs + t) * 2);
      }
    }
  }
}

// Walks every element address of every (block, layer, K/V, head, token, channel) through the
// layer views, as a kernel would, and counts how often each pool byte is covered.
void expect_addresses_tile_the_pool(const KvSpec& spec, int32_t block_size, int32_t num_blocks) {
  const KvLayout layout(spec, block_size);
  std::vector<std::byte> pool(static_cast<size_t>(layout.pool_bytes(num_blocks)));
  std::vector<int> covered(pool.size(), 0);
  std::byte* base = pool.data();
  int64_t num_element_bytes = 0;
  int64_t num_scale_bytes = 0;
  // The documented formula, written out independently: layer l starts after the bytes of the
  // layers before it, 2*H*B*D*elem (+ 4*H*B for I8; I4: H*B*D + 4*H*D + 4*H*B) each.
  std::vector<int64_t> layer_start = {0};
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const DType d = spec.layer_dtype(l);
    const int64_t hb = int64_t{spec.num_kv_heads} * block_size;
    const int64_t hd = int64_t{spec.num_kv_heads} * spec.head_dim;
    layer_start.push_back(layer_start.back() + (d == DType::kI4
                                                    ? hb * spec.head_dim + 4 * hd + 4 * hb
                                                    : 2 * hb * spec.head_dim * dtype_size(d) +
                                                          (d == DType::kI8 ? 4 * hb : 0)));
  }
  ASSERT_EQ(layer_start.back(), layout.block_bytes());
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    const PagedKvCacheView view = layout.layer_view(base, l);
    if (view.dtype == DType::kI4) {
      expect_int4_layer_tiles(spec, layout, view, base, layer_start[static_cast<size_t>(l)],
                              num_blocks, covered, &num_element_bytes, &num_scale_bytes);
      continue;
    }
    const int64_t elem = dtype_size(view.dtype);
    const int64_t area = int64_t{spec.num_kv_heads} * block_size * spec.head_dim * elem;
    const int64_t start = layer_start[static_cast<size_t>(l)];
    ASSERT_EQ(view.dtype, spec.layer_dtypes.empty() ? spec.dtype
                                                    : spec.layer_dtypes[static_cast<size_t>(l)]);
    ASSERT_EQ(view.block_stride * elem, layout.block_bytes());
    for (int32_t b = 0; b < num_blocks; ++b) {
      for (int kv = 0; kv < 2; ++kv) {
        void* data = kv == 0 ? view.k_data : view.v_data;
        for (int32_t h = 0; h < spec.num_kv_heads; ++h) {
          for (int32_t t = 0; t < block_size; ++t) {
            for (int32_t c = 0; c < spec.head_dim; ++c) {
              const int64_t byte =
                  static_cast<std::byte*>(data) - base + (view.offset(b, h, t) + c) * elem;
              // The documented formula, written out independently.
              const int64_t expected = b * layout.block_bytes() + start + kv * area +
                                       ((h * block_size + t) * spec.head_dim + c) * elem;
              ASSERT_EQ(byte, expected) << "b " << b << " l " << l << " kv " << kv << " h " << h
                                        << " t " << t << " c " << c;
              // The element lies inside its own block.
              ASSERT_GE(byte, b * layout.block_bytes());
              ASSERT_LE(byte + elem, (b + 1) * layout.block_bytes());
              for (int64_t i = 0; i < elem; ++i) ++covered[static_cast<size_t>(byte + i)];
              num_element_bytes += elem;
            }
          }
        }
      }
      // I8: the per-token fp16 scales after the layer's V, K's then V's, [kv_heads][block_size].
      if (view.k_scale_data == nullptr) continue;
      for (int kv = 0; kv < 2; ++kv) {
        void* data = kv == 0 ? view.k_scale_data : view.v_scale_data;
        for (int32_t h = 0; h < spec.num_kv_heads; ++h) {
          for (int32_t t = 0; t < block_size; ++t) {
            const int64_t byte =
                static_cast<std::byte*>(data) - base + view.scale_offset(b, h, t) * 2;
            const int64_t expected = b * layout.block_bytes() + start + 2 * area +
                                     kv * spec.num_kv_heads * block_size * 2 +
                                     (h * block_size + t) * 2;
            ASSERT_EQ(byte, expected) << "scale b " << b << " l " << l << " kv " << kv;
            for (int64_t i = 0; i < 2; ++i) ++covered[static_cast<size_t>(byte + i)];
            num_scale_bytes += 2;
          }
        }
      }
    }
  }
  EXPECT_EQ(num_element_bytes + num_scale_bytes, layout.pool_bytes(num_blocks));
  for (size_t i = 0; i < covered.size(); ++i) {
    ASSERT_EQ(covered[i], 1) << "byte " << i << (covered[i] == 0 ? " is a hole" : " overlaps");
  }
}

TEST(KvLayoutTest, DistinctAddressesNeverOverlapAndTileEveryBlockExactly) {
  expect_addresses_tile_the_pool({3, 2, 4, DType::kF32}, 8, 3);
  expect_addresses_tile_the_pool({2, 3, 8, DType::kBF16}, 8, 4);
  expect_addresses_tile_the_pool({1, 1, 16, DType::kF8E4M3}, 16, 2);
  expect_addresses_tile_the_pool({4, 1, 2, DType::kF16}, 32, 3);
  expect_addresses_tile_the_pool({3, 2, 8, DType::kI8}, 8, 3);
  expect_addresses_tile_the_pool({2, 3, 16, DType::kF8E5M2}, 16, 2);
  expect_addresses_tile_the_pool({3, 2, 8, DType::kI4}, 8, 3);
  expect_addresses_tile_the_pool({2, 1, 6, DType::kI4}, 16, 2);
}

// ---- mixed-dtype layouts (per-layer exceptions) ------------------------------------------------

TEST(KvLayoutTest, MixedLayoutsTileEveryBlockExactly) {
  using enum DType;
  expect_addresses_tile_the_pool({3, 2, 8, kI8, {kF32, kI8, kI8}}, 8, 3);
  expect_addresses_tile_the_pool({3, 2, 8, kI8, {kI8, kF32, kI8}}, 16, 2);
  expect_addresses_tile_the_pool({4, 1, 16, kF8E4M3, {kF8E4M3, kF8E4M3, kF8E4M3, kF32}}, 8, 3);
  expect_addresses_tile_the_pool({3, 3, 8, kBF16, {kF32, kBF16, kF16}}, 8, 2);
  expect_addresses_tile_the_pool({4, 2, 4, kI8, {kF32, kI8, kF8E5M2, kBF16}}, 8, 2);
  expect_addresses_tile_the_pool({3, 2, 8, kI4, {kF32, kI4, kI4}}, 8, 3);
  expect_addresses_tile_the_pool({4, 1, 16, kI4, {kI4, kF32, kI8, kI4}}, 16, 2);
}

// ---- INT4 (KIVI) --------------------------------------------------------------------------------

TEST(KvLayoutTest, Int4LayoutSizesOffsetsAndViewFields) {
  // Llama 3 8B shape, block 16 (docs/kv-quant.md): codes 2 x 8,192 bytes per layer, K scale and
  // zero 2 x 8 x 128 x 2 = 4,096, V scale and zero 2 x 8 x 16 x 2 = 512.
  const KvLayout layout({32, 8, 128, DType::kI4}, 16);
  EXPECT_EQ(layout.kv_area_bytes(), 8192);
  EXPECT_EQ(layout.scale_area_bytes(), 0) << "no I8-style per-token scale area";
  EXPECT_EQ(layout.k_stats_bytes(0), 4096);
  EXPECT_EQ(layout.v_stats_bytes(0), 512);
  EXPECT_EQ(layout.layer_bytes(), 20992);
  EXPECT_EQ(layout.block_bytes(), 32 * 20992);
  EXPECT_EQ(layout.bytes_per_token(), 41984.0);  // 1,312 per layer: 0.32x of BF16's 4,096
  EXPECT_EQ(layout.scale_bytes_per_token(), 32 * 288.0);
  EXPECT_EQ(layout.spec().bytes_per_token(16), 41984.0);
  EXPECT_EQ(layout.spec().layer_block_bytes(3, 16), 20992);
  EXPECT_EQ(layout.k_scale_offset_bytes(1), 20992 + 16384);
  EXPECT_EQ(layout.k_zero_offset_bytes(1), 20992 + 16384 + 2048);
  EXPECT_EQ(layout.v_scale_offset_bytes(1), 20992 + 16384 + 4096);
  EXPECT_EQ(layout.v_zero_offset_bytes(1), 20992 + 16384 + 4096 + 256);
  std::byte* base = reinterpret_cast<std::byte*>(uintptr_t{4096});  // never dereferenced
  const PagedKvCacheView v = layout.layer_view(base, 1);
  EXPECT_EQ(v.dtype, DType::kI4);
  EXPECT_EQ(static_cast<std::byte*>(v.k_data) - base, 20992);
  EXPECT_EQ(static_cast<std::byte*>(v.v_data) - base, 20992 + 8192);
  EXPECT_EQ(v.block_stride, layout.block_bytes()) << "I4 strides count bytes";
  EXPECT_EQ(v.head_stride, 16 * 64);
  EXPECT_EQ(v.token_stride, 64);
  EXPECT_EQ(static_cast<std::byte*>(v.k_scale_data) - base, layout.k_scale_offset_bytes(1));
  EXPECT_EQ(static_cast<std::byte*>(v.k_zero_data) - base, layout.k_zero_offset_bytes(1));
  EXPECT_EQ(static_cast<std::byte*>(v.v_scale_data) - base, layout.v_scale_offset_bytes(1));
  EXPECT_EQ(static_cast<std::byte*>(v.v_zero_data) - base, layout.v_zero_offset_bytes(1));
  EXPECT_EQ(v.scale_block_stride, layout.block_bytes() / 2);
  EXPECT_EQ(v.scale_head_stride, 16);
  EXPECT_EQ(v.k_stat_head_stride, 128);
  // Other dtypes leave the I4 fields empty.
  const PagedKvCacheView i8 = KvLayout({2, 2, 8, DType::kI8}, 16).layer_view(base, 1);
  EXPECT_EQ(i8.k_zero_data, nullptr);
  EXPECT_EQ(i8.v_zero_data, nullptr);
  EXPECT_EQ(i8.k_stat_head_stride, 0);
}

TEST(KvLayoutTest, Int4PerTokenBytesAreExactEvenWhenFractional) {
  // One KV head of 80 channels at block 128: K's statistics are 320 bytes per block, 2.5 per
  // token: 80 / 2 x 2 codes + 2.5 + 4 (V's scale and zero) = 86.5.
  const KvSpec spec{1, 1, 80, DType::kI4};
  EXPECT_EQ(spec.block_bytes(128), 128 * 80 + 320 + 4 * 128);
  EXPECT_EQ(spec.bytes_per_token(128), 86.5);
  EXPECT_EQ(spec.scale_bytes_per_token(128), 6.5);
  EXPECT_EQ(KvLayout(spec, 128).bytes_per_token(), 86.5);
  EXPECT_EQ(kv_bytes_per_token({1, 1, 80, 0, 0}, KvCacheDType::kInt4, 128), 86.5);
  // Without I4 the block-size forms agree with the per-token ones.
  EXPECT_EQ(kLlama8B.bytes_per_token(16), static_cast<double>(kLlama8B.bytes_per_token()));
  const KvSpec i8{3, 2, 24, DType::kI8};
  EXPECT_EQ(i8.scale_bytes_per_token(8), static_cast<double>(i8.scale_bytes_per_token()));
}

TEST(KvLayoutTest, Int4IsAPoolDtypeButNotATensorDtype) {
  EXPECT_TRUE(is_kv_pool_dtype(DType::kI4));
  EXPECT_EQ(kv_pool_dtype(KvCacheDType::kInt4), DType::kI4);
  EXPECT_EQ(kv_cache_dtype_of(DType::kI4), KvCacheDType::kInt4);
  EXPECT_EQ(dtype_bits(DType::kI4), 4);
  EXPECT_EQ(dtype_bits(DType::kBF16), 16);
  EXPECT_EQ(dtype_name(DType::kI4), "I4");
  EXPECT_EQ(dtype_from_safetensors_name("I4"), std::nullopt) << "never parsed from a checkpoint";
}

TEST(KvLayoutDeathTest, Int4SizesNeedABlockSizeAndAnEvenHeadDim) {
  const KvSpec i4{2, 2, 8, DType::kI4};
  EXPECT_DEATH((void)i4.bytes_per_token(), "depend on the block size");
  EXPECT_DEATH((void)i4.scale_bytes_per_token(), "depend on the block size");
  EXPECT_DEATH((void)KvSpec({2, 2, 8, DType::kF32, {DType::kF32, DType::kI4}}).bytes_per_token(),
               "depend on the block size");
  EXPECT_DEATH((void)dtype_size(DType::kI4), "use dtype_bits");
  EXPECT_DEATH(KvLayout(KvSpec{1, 1, 7, DType::kI4}, 16), "even head_dim");
}

TEST(KvLayoutTest, MixedLayoutOffsetsAreEachLayersBytesSummedAndSixteenByteAligned) {
  // Llama 3 8B shape, block 16: int8 layers 33,280 bytes, the two f32 layers 131,072.
  std::vector<DType> dtypes(32, DType::kI8);
  dtypes[0] = dtypes[31] = DType::kF32;
  const KvLayout layout(KvSpec{32, 8, 128, DType::kI8, dtypes}, 16);
  EXPECT_TRUE(layout.spec().is_mixed());
  EXPECT_EQ(layout.layer_bytes(0), 131072);
  EXPECT_EQ(layout.layer_bytes(1), 33280);
  EXPECT_EQ(layout.layer_offset_bytes(1), 131072);
  EXPECT_EQ(layout.layer_offset_bytes(2), 131072 + 33280);
  EXPECT_EQ(layout.k_scale_offset_bytes(2), 131072 + 33280 + 2 * 16384);
  EXPECT_EQ(layout.layer_offset_bytes(31), 131072 + 30 * 33280);
  EXPECT_EQ(layout.block_bytes(), 2 * 131072 + 30 * 33280);
  EXPECT_EQ(layout.block_bytes(), 16 * layout.spec().bytes_per_token());
  EXPECT_EQ(layout.spec().bytes_per_token(), 2 * 8192 + 30 * 2080);
  EXPECT_EQ(layout.spec().scale_bytes_per_token(), 30 * 32);
  for (const int32_t bs : {8, 16, 32, 64, 128}) {
    for (const auto& mix : {std::vector<DType>{DType::kF32, DType::kI8, DType::kF8E4M3},
                            std::vector<DType>{DType::kI8, DType::kBF16, DType::kF32}}) {
      const KvLayout l3(KvSpec{3, 1, 8, DType::kI8, mix}, bs);  // head rows of 8 bytes only
      for (int32_t l = 0; l < 3; ++l) {
        EXPECT_EQ(l3.k_offset_bytes(l) % 16, 0) << "bs " << bs << " layer " << l;
        EXPECT_EQ(l3.v_offset_bytes(l) % 16, 0) << "bs " << bs << " layer " << l;
      }
      EXPECT_EQ(l3.block_bytes() % 16, 0);
    }
  }
}

TEST(KvLayoutTest, MixedLayoutViewsCarryTheirLayersDtypeStridesAndScales) {
  const KvLayout layout(
      KvSpec{4, 2, 8, DType::kF8E4M3, {DType::kF32, DType::kF8E4M3, DType::kI8, DType::kF8E4M3}},
      16, KvStaticScales{{0.5f, 2.0f, 4.0f, 0.25f}, {1.5f, 3.0f, 5.0f, 0.125f}});
  std::byte* base = reinterpret_cast<std::byte*>(uintptr_t{4096});  // never dereferenced
  const PagedKvCacheView f32 = layout.layer_view(base, 0);
  EXPECT_EQ(f32.dtype, DType::kF32);
  EXPECT_EQ(f32.block_stride, layout.block_bytes() / 4);
  EXPECT_EQ(f32.k_scale, 1.0f) << "static scales are for fp8 layers only";
  EXPECT_EQ(f32.k_scale_data, nullptr);
  const PagedKvCacheView fp8 = layout.layer_view(base, 1);
  EXPECT_EQ(fp8.dtype, DType::kF8E4M3);
  EXPECT_EQ(fp8.block_stride, layout.block_bytes());
  EXPECT_EQ(fp8.k_scale, 2.0f);
  EXPECT_EQ(fp8.v_scale, 3.0f);
  EXPECT_EQ(static_cast<std::byte*>(fp8.k_data) - base, 2 * 2 * 16 * 8 * 4);
  const PagedKvCacheView i8 = layout.layer_view(base, 2);
  EXPECT_EQ(i8.dtype, DType::kI8);
  EXPECT_EQ(i8.k_scale, 1.0f);
  EXPECT_EQ(static_cast<std::byte*>(i8.k_scale_data) - base, layout.k_scale_offset_bytes(2));
  EXPECT_EQ(i8.scale_block_stride, layout.block_bytes() / 2);
  EXPECT_EQ(layout.layer_view(base, 3).v_scale, 0.125f);
  EXPECT_EQ(layout.layer_view(base, 3).k_scale_data, nullptr) << "INT8 scale areas: I8 layers only";
}

TEST(KvLayoutTest, AUniformOverrideListIsNotMixed) {
  const KvLayout layout(KvSpec{2, 2, 8, DType::kF32, {DType::kF32, DType::kF32}}, 16);
  EXPECT_FALSE(layout.spec().is_mixed());
  EXPECT_EQ(layout.layer_bytes(), layout.layer_bytes(1));
  EXPECT_EQ(layout.block_bytes(), KvLayout(KvSpec{2, 2, 8, DType::kF32}, 16).block_bytes());
}

TEST(KvLayoutDeathTest, MixedLayoutRefusesUniformSizesAndBadOverrides) {
  const KvLayout layout(KvSpec{2, 2, 8, DType::kI8, {DType::kF32, DType::kI8}}, 16);
  EXPECT_DEATH((void)layout.layer_bytes(), "mixed-dtype layout");
  EXPECT_DEATH((void)layout.kv_area_bytes(), "mixed-dtype layout");
  EXPECT_DEATH(KvLayout(KvSpec{2, 2, 8, DType::kI8, {DType::kF32}}, 16), "one per layer");
  EXPECT_DEATH(KvLayout(KvSpec{2, 2, 8, DType::kI8, {DType::kF32, DType::kU8}}, 16),
               "not a KV pool dtype");
  // Below block size 8 a layer's bytes need not be a multiple of 16: an 8-byte fp8 layer
  // (1 head x 2 tokens x 2 channels, K and V) would leave the F32 layer after it misaligned.
  EXPECT_DEATH(KvLayout(KvSpec{2, 1, 2, DType::kF8E4M3, {DType::kF8E4M3, DType::kF32}}, 2),
               "16-byte aligned");
}

TEST(KvLayoutTest, Int8LayoutSizesAndViewScaleFields) {
  // Llama 3 8B shape, block 16: codes 2 x 8 x 16 x 128 = 32 KiB per layer, scales 2 x 8 x 16 x 2.
  const KvLayout layout({32, 8, 128, DType::kI8}, 16);
  EXPECT_EQ(layout.kv_area_bytes(), 8 * 16 * 128);
  EXPECT_EQ(layout.scale_area_bytes(), 8 * 16 * 2);
  EXPECT_EQ(layout.layer_bytes(), 2 * 8 * 16 * 128 + 2 * 8 * 16 * 2);
  EXPECT_EQ(layout.block_bytes(), 32 * layout.layer_bytes());
  EXPECT_EQ(layout.block_bytes(), 16 * layout.spec().bytes_per_token());
  EXPECT_EQ(layout.k_scale_offset_bytes(1), layout.layer_bytes() + 2 * 8 * 16 * 128);
  EXPECT_EQ(layout.v_scale_offset_bytes(1), layout.k_scale_offset_bytes(1) + 8 * 16 * 2);
  std::byte* base = reinterpret_cast<std::byte*>(uintptr_t{4096});  // never dereferenced
  const PagedKvCacheView v = layout.layer_view(base, 2);
  EXPECT_EQ(v.scale_block_stride, layout.block_bytes() / 2);
  EXPECT_EQ(v.scale_head_stride, 16);
  EXPECT_EQ(static_cast<std::byte*>(v.k_scale_data) - base, layout.k_scale_offset_bytes(2));
  EXPECT_EQ(static_cast<std::byte*>(v.v_scale_data) - base, layout.v_scale_offset_bytes(2));
  // Non-int8 layouts have no scale area and null scale pointers.
  const PagedKvCacheView f = KvLayout({2, 2, 8, DType::kF8E4M3}, 16).layer_view(base, 1);
  EXPECT_EQ(f.k_scale_data, nullptr);
  EXPECT_EQ(f.scale_block_stride, 0);
  EXPECT_EQ(f.k_scale, 1.0f);
}

TEST(KvLayoutTest, Fp8StaticScalesReachEachLayersView) {
  const KvLayout layout({3, 2, 8, DType::kF8E4M3}, 16,
                        KvStaticScales{{0.5f, 2.0f, 0.25f}, {1.5f, 3.0f, 0.125f}});
  std::byte* base = reinterpret_cast<std::byte*>(uintptr_t{4096});
  EXPECT_EQ(layout.layer_view(base, 1).k_scale, 2.0f);
  EXPECT_EQ(layout.layer_view(base, 1).v_scale, 3.0f);
  EXPECT_EQ(layout.layer_view(base, 2).k_scale, 0.25f);
  EXPECT_EQ(layout.layer_view(base, 0).v_scale, 1.5f);
}

TEST(KvLayoutTest, SlotOffsetOfALayerViewMatchesTheBlockAndOffset) {
  const KvLayout layout({2, 2, 4, DType::kF32}, 8);
  std::vector<float> pool(static_cast<size_t>(layout.pool_bytes(5)) / sizeof(float));
  const PagedKvCacheView view = layout.layer_view(pool.data(), 1);
  for (int64_t slot = 0; slot < 5 * 8; ++slot) {
    for (int32_t h = 0; h < 2; ++h) {
      ASSERT_EQ(view.slot_offset(slot, h),
                view.offset(static_cast<int32_t>(slot / 8), h, static_cast<int32_t>(slot % 8)));
    }
  }
  // A write through the view lands where the layout says: block 3, layer 1, V, head 1, token 5.
  *view.v<float>(3, 1, 5) = 42.0f;
  const int64_t byte = 3 * layout.block_bytes() + layout.v_offset_bytes(1) + (1 * 8 + 5) * 4 * 4;
  EXPECT_EQ(pool[static_cast<size_t>(byte / 4)], 42.0f);
}

TEST(KvLayoutDeathTest, InvalidSpecOrLayerAborts) {
  const KvSpec no_layers{0, 8, 128, DType::kBF16};
  const KvSpec no_heads{32, 0, 128, DType::kBF16};
  const KvSpec no_dim{32, 8, 0, DType::kBF16};
  EXPECT_DEATH(KvLayout(no_layers, 16), "positive layers");
  EXPECT_DEATH(KvLayout(no_heads, 16), "positive layers");
  EXPECT_DEATH(KvLayout(no_dim, 16), "positive layers");
  EXPECT_DEATH(KvLayout(kLlama8B, 0), "block_size must be positive");
  const KvLayout layout({2, 1, 8, DType::kF32}, 8);
  std::vector<std::byte> block(static_cast<size_t>(layout.block_bytes()));
  EXPECT_DEATH((void)layout.layer_view(block.data(), 2), "layer index out of range");
  EXPECT_DEATH((void)layout.layer_view(block.data(), -1), "layer index out of range");
}

}  // namespace
}  // namespace strata::kv

namespace strata::kv {
namespace {

// `strata plan` sizes the pool with kv_block_bytes (kv_accounting.h); the engine allocates
// KvLayout::block_bytes. They must agree byte for byte for every pool dtype, and the KV cache
// dtype <-> pool element type mapping must round-trip.
TEST(KvAccountingTest, PlanAndLayoutAgreeByteForByteForEveryPoolDtype) {
  const KvShape shapes[] = {
      {32, 8, 128, 0, 0}, {28, 4, 128, 0, 0}, {2, 1, 64, 0, 0}, {3, 5, 96, 0, 0}};
  int checked = 0;
  for (const KvCacheDType d : {KvCacheDType::kF32, KvCacheDType::kBF16, KvCacheDType::kF16,
                               KvCacheDType::kFp8E4M3, KvCacheDType::kFp8E5M2,
                               KvCacheDType::kInt8, KvCacheDType::kInt4}) {
    const std::optional<DType> pool_dtype = kv_pool_dtype(d);
    ASSERT_TRUE(pool_dtype.has_value()) << kv_cache_dtype_name(d);
    EXPECT_TRUE(is_kv_pool_dtype(*pool_dtype));
    EXPECT_EQ(kv_cache_dtype_of(*pool_dtype), d);
    for (const KvShape& s : shapes) {
      for (const int32_t bs : {8, 16, 32, 64, 128}) {
        const KvLayout layout(KvSpec{s.num_layers, s.num_kv_heads, s.head_dim, *pool_dtype}, bs);
        EXPECT_EQ(kv_block_bytes(s, d, bs), layout.block_bytes())
            << kv_cache_dtype_name(d) << " block " << bs;
        EXPECT_EQ(kv_bytes_per_token(s, d, bs), layout.bytes_per_token());
        EXPECT_EQ(kv_scale_bytes_per_token(s, d, bs), layout.scale_bytes_per_token());
        if (d != KvCacheDType::kInt4) {
          EXPECT_DOUBLE_EQ(kv_bytes_per_token(s, d, bs),
                           static_cast<double>(layout.spec().bytes_per_token()));
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 7 * 4 * 5);
  EXPECT_EQ(kv_cache_dtype_of(DType::kU8), std::nullopt);
}

// The same agreement for mixed pools (--kv-cache-dtype-skip-layers, --kv-quant-check): every pool
// dtype as the base, with F32 at the first layer, the last, or every other one.
TEST(KvAccountingTest, PlanAndLayoutAgreeByteForByteForMixedLayouts) {
  const KvShape shapes[] = {{32, 8, 128, 0, 0}, {2, 1, 64, 0, 0}, {3, 5, 96, 0, 0}};
  int checked = 0;
  for (const KvCacheDType d : {KvCacheDType::kBF16, KvCacheDType::kF16, KvCacheDType::kFp8E4M3,
                               KvCacheDType::kFp8E5M2, KvCacheDType::kInt8, KvCacheDType::kInt4}) {
    for (const KvShape& s : shapes) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        std::vector<KvCacheDType> cache_dtypes(static_cast<size_t>(s.num_layers), d);
        std::vector<DType> pool_dtypes(static_cast<size_t>(s.num_layers), *kv_pool_dtype(d));
        for (int32_t l = 0; l < s.num_layers; ++l) {
          const bool f32 = pattern == 0   ? l == 0
                           : pattern == 1 ? l == s.num_layers - 1
                                          : l % 2 == 1;
          if (!f32) continue;
          cache_dtypes[static_cast<size_t>(l)] = KvCacheDType::kF32;
          pool_dtypes[static_cast<size_t>(l)] = DType::kF32;
        }
        for (const int32_t bs : {8, 16, 32, 64, 128}) {
          const KvLayout layout(
              KvSpec{s.num_layers, s.num_kv_heads, s.head_dim, *kv_pool_dtype(d), pool_dtypes}, bs);
          ASSERT_TRUE(layout.spec().is_mixed());
          EXPECT_EQ(kv_block_bytes(s, cache_dtypes, bs), layout.block_bytes())
              << kv_cache_dtype_name(d) << " pattern " << pattern << " block " << bs;
          EXPECT_EQ(kv_bytes_per_token(s, cache_dtypes, bs), layout.bytes_per_token());
          EXPECT_EQ(kv_scale_bytes_per_token(s, cache_dtypes, bs), layout.scale_bytes_per_token());
          if (d != KvCacheDType::kInt4) {
            EXPECT_DOUBLE_EQ(kv_bytes_per_token(s, cache_dtypes, bs),
                             static_cast<double>(layout.spec().bytes_per_token()));
            EXPECT_DOUBLE_EQ(kv_scale_bytes_per_token(s, cache_dtypes, bs),
                             static_cast<double>(layout.spec().scale_bytes_per_token()));
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 3 * 3 * 5);
  // A uniform list gives the uniform figures.
  const KvShape s{28, 4, 128, 0, 0};
  const std::vector<KvCacheDType> all_int8(28, KvCacheDType::kInt8);
  EXPECT_EQ(kv_block_bytes(s, all_int8, 16), kv_block_bytes(s, KvCacheDType::kInt8, 16));
}

TEST(KvAccountingTest, EverySpellingParses) {
  const std::pair<const char*, KvCacheDType> cases[] = {
      {"float32", KvCacheDType::kF32},    {"fp32", KvCacheDType::kF32},
      {"bfloat16", KvCacheDType::kBF16},  {"bf16", KvCacheDType::kBF16},
      {"float16", KvCacheDType::kF16},    {"fp16", KvCacheDType::kF16},
      {"fp8", KvCacheDType::kFp8E4M3},    {"fp8_e4m3", KvCacheDType::kFp8E4M3},
      {"fp8_e5m2", KvCacheDType::kFp8E5M2}, {"int8", KvCacheDType::kInt8},
      {"int4", KvCacheDType::kInt4}};
  for (const auto& [name, d] : cases) EXPECT_EQ(parse_kv_cache_dtype(name), d) << name;
  EXPECT_EQ(parse_kv_cache_dtype("fp4"), std::nullopt);
  EXPECT_EQ(parse_kv_cache_dtype(""), std::nullopt);
}

// auto is a dtype of its own: the device resolves it to its model precision, never a dtype
// that stands for it (the GPU's float32 is refused, not read as bfloat16).
TEST(KvAccountingTest, AutoIsExplicitAndResolvedByTheDevice) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), KvCacheDType::kAuto);
  EXPECT_EQ(kv_cache_dtype_name(KvCacheDType::kAuto), "auto");
  EXPECT_EQ(kv_pool_dtype(KvCacheDType::kAuto), std::nullopt);
  EXPECT_EQ(resolve_kv_cache_dtype(KvCacheDType::kAuto, DType::kF32), DType::kF32);
  EXPECT_EQ(resolve_kv_cache_dtype(KvCacheDType::kAuto, DType::kBF16), DType::kBF16);
  EXPECT_EQ(resolve_kv_cache_dtype(KvCacheDType::kF32, DType::kBF16), DType::kF32);
  EXPECT_EQ(resolve_kv_cache_dtype(KvCacheDType::kInt4, DType::kBF16), DType::kI4);
  for (const DType d : {DType::kF32, DType::kBF16, DType::kI8, DType::kI4}) {
    EXPECT_NE(kv_cache_dtype_of(d), KvCacheDType::kAuto);
  }
}

}  // namespace
}  // namespace strata::kv
