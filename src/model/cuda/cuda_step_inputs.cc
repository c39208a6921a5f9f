#include "model/cuda/cuda_step_inputs.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace strata::model {
namespace {

size_t align16(size_t n) { return (n + 15) & ~size_t{15}; }

// Appends n elements of T at the packing cursor and returns their offset.
template <typename T>
size_t pack(std::byte* base, size_t& cursor, const T* src, size_t n) {
  const size_t at = cursor;
  if (base != nullptr && n > 0) std::memcpy(base + at, src, n * sizeof(T));
  cursor = align16(cursor + n * sizeof(T));
  return at;
}

// The sample rows' masks (DeviceSampleSpec::allowed or mask_later): each row's index among the
// masked ones (-1: unmasked), and how many are masked.
int32_t mask_rows(const ForwardBatch& b, std::vector<int32_t>& rows) {
  rows.assign(b.sample_specs.size(), -1);
  int32_t masked = 0;
  for (size_t i = 0; i < b.sample_specs.size(); ++i) {
    if (b.sample_specs[i].allowed != nullptr || b.sample_specs[i].mask_later) rows[i] = masked++;
  }
  return masked;
}

// The batch's newest-blocks group (INT4), or null without one.
const GroupBatchView* newest_view(const ForwardBatch& b) {
  const int32_t g = b.newest_group();
  return g >= 1 ? &b.groups[static_cast<size_t>(g) - 1] : nullptr;
}

}  // namespace

Result<CudaStepInputs> CudaStepInputs::create(int32_t max_num_tokens, int32_t max_num_seqs,
                                              int32_t vocab_size) {
  CudaStepInputs in;
  in.mask_words_ = (int64_t{vocab_size} + 63) / 64;
  // Tokens: ids, positions, logits / sample rows (4 bytes each) and slots (8; INT4: 8 more for
  // the newest-blocks group's slots); sequences: three indptr-like arrays and the sampling specs
  // (28 bytes; INT4: 8 more for the newest-blocks group's indptr and first blocks); block ids:
  // room for 64 blocks per sequence (INT4: and 4 newest-blocks entries) before the first growth.
  const auto tokens = static_cast<size_t>(max_num_tokens);
  const auto seqs = static_cast<size_t>(max_num_seqs) + 1;
  STRATA_RETURN_IF_ERROR(in.reserve(tokens * 32 + seqs * 48 + seqs * 68 * 4 + 512));
  return in;
}

Status CudaStepInputs::reserve(size_t bytes) {
  if (bytes <= host_bytes_) return Status::Ok();
  bytes = std::max(bytes, host_bytes_ * 2);
  void* host = nullptr;
  STRATA_CUDA_CHECK(cudaMallocHost(&host, bytes));
  host_.reset(static_cast<std::byte*>(host));
  host_bytes_ = bytes;
  Result<cuda::DeviceBuffer> device = cuda::DeviceBuffer::allocate(bytes);
  if (!device.ok()) return device.status();
  device_ = std::move(device).value();
  return Status::Ok();
}

Result<CudaStepInputs::Device> CudaStepInputs::upload(const ForwardBatch& b, cudaStream_t stream) {
  late_masks_.clear();
  const size_t num_tokens = b.token_ids.size();
  const auto num_seqs = static_cast<size_t>(b.layout.num_seqs);
  const auto nnz = static_cast<size_t>(b.layout.kv_indptr[num_seqs]);
  // INT4 (validate_step_group passed for the newest-blocks group): its entries and slots travel
  // too.
  const GroupBatchView* newest = newest_view(b);
  const bool int4 = newest != nullptr;
  const PagedKvLayout newest_layout = int4 ? newest->layout : PagedKvLayout{};
  const auto newest_nnz = int4 ? static_cast<size_t>(newest_layout.kv_indptr[num_seqs]) : 0;
  const size_t newest_seqs = int4 ? num_seqs : 0;
  const size_t newest_tokens = int4 ? num_tokens : 0;
  const int64_t* newest_slot_src = int4 ? newest->slot_mapping.data() : nullptr;
  // Measure, grow if needed, then pack for real.
  const size_t num_samples = b.sample_specs.size();
  std::vector<float> temperature(num_samples), top_p(num_samples), min_p(num_samples);
  std::vector<int32_t> top_k(num_samples);
  std::vector<uint64_t> seeds(num_samples);
  std::vector<int32_t> all_rows(b.logits_rows.begin(), b.logits_rows.end());
  all_rows.insert(all_rows.end(), b.sample_rows.begin(), b.sample_rows.end());
  for (size_t i = 0; i < num_samples; ++i) {
    const DeviceSampleSpec& spec = b.sample_specs[i];
    temperature[i] = spec.temperature;
    top_k[i] = spec.top_k;
    top_p[i] = spec.top_p;
    min_p[i] = spec.min_p;
    seeds[i] = spec.seed;
  }
  std::vector<int32_t> mask_row;
  const int32_t num_masked = mask_rows(b, mask_row);
  const size_t mask_bytes = static_cast<size_t>(mask_words_) * 8;
  // Two passes: measure (base null; reserve may reallocate the buffers), then pack into the
  // pinned buffer as it is after that.
  for (int pass = 0; pass < 2; ++pass) {
    std::byte* const base = pass == 0 ? nullptr : host_.get();
    size_t cursor = 0;
    const size_t ids = pack(base, cursor, b.token_ids.data(), num_tokens);
    const size_t pos = pack(base, cursor, b.positions.data(), num_tokens);
    const size_t q_indptr = pack(base, cursor, b.q_indptr.data(), num_seqs + 1);
    const size_t kv_indptr = pack(base, cursor, b.layout.kv_indptr, num_seqs + 1);
    const size_t kv_indices = pack(base, cursor, b.layout.kv_indices, nnz);
    const size_t last_len = pack(base, cursor, b.layout.kv_last_page_len, num_seqs);
    const size_t slots = pack(base, cursor, b.slot_mapping.data(), num_tokens);
    const size_t rows = pack(base, cursor, all_rows.data(), all_rows.size());
    const size_t temp = pack(base, cursor, temperature.data(), num_samples);
    const size_t k = pack(base, cursor, top_k.data(), num_samples);
    const size_t p = pack(base, cursor, top_p.data(), num_samples);
    const size_t mp = pack(base, cursor, min_p.data(), num_samples);
    const size_t seed = pack(base, cursor, seeds.data(), num_samples);
    const size_t newest_indptr =
        pack(base, cursor, newest_layout.kv_indptr, int4 ? num_seqs + 1 : 0);
    const size_t newest_indices = pack(base, cursor, newest_layout.kv_indices, newest_nnz);
    const size_t newest_first = pack(base, cursor, newest_layout.first_block, newest_seqs);
    const size_t newest_slots = pack(base, cursor, newest_slot_src, newest_tokens);
    const size_t rows_of_masks = pack(base, cursor, mask_row.data(), num_masked > 0 ? num_samples : 0);
    // The masks last, in the pinned buffer, where the device reads them (place_masks).
    const size_t mask_bits = cursor;
    cursor = align16(cursor + static_cast<size_t>(num_masked) * mask_bytes);
    if (base == nullptr) {
      STRATA_RETURN_IF_ERROR(reserve(cursor));
      continue;
    }
    STRATA_CUDA_CHECK(cudaMemcpyAsync(device_.data(), host_.get(), mask_bits,
                                      cudaMemcpyHostToDevice, stream));
    const std::byte* d = static_cast<const std::byte*>(device_.data());
    Device out;
    out.token_ids = reinterpret_cast<const int32_t*>(d + ids);
    out.positions = reinterpret_cast<const int32_t*>(d + pos);
    out.q_indptr = reinterpret_cast<const int32_t*>(d + q_indptr);
    out.slot_mapping = reinterpret_cast<const int64_t*>(d + slots);
    out.logits_rows = reinterpret_cast<const int32_t*>(d + rows);
    out.temperature = reinterpret_cast<const float*>(d + temp);
    out.top_k = reinterpret_cast<const int32_t*>(d + k);
    out.top_p = reinterpret_cast<const float*>(d + p);
    out.min_p = reinterpret_cast<const float*>(d + mp);
    out.seeds = reinterpret_cast<const uint64_t*>(d + seed);
    if (num_masked > 0) {
      out.mask_row = reinterpret_cast<const int32_t*>(d + rows_of_masks);
      out.masks = place_masks(b, mask_row, reinterpret_cast<uint64_t*>(base + mask_bits));
      out.mask_words = mask_words_;
    }
    out.layout.kv_indptr = reinterpret_cast<const int32_t*>(d + kv_indptr);
    out.layout.kv_indices = reinterpret_cast<const int32_t*>(d + kv_indices);
    out.layout.kv_last_page_len = reinterpret_cast<const int32_t*>(d + last_len);
    out.layout.num_seqs = b.layout.num_seqs;
    out.layout.block_size = b.layout.block_size;
    if (int4) {
      out.newest_slot_mapping = reinterpret_cast<const int64_t*>(d + newest_slots);
      out.newest_layout.kv_indptr = reinterpret_cast<const int32_t*>(d + newest_indptr);
      out.newest_layout.kv_indices = reinterpret_cast<const int32_t*>(d + newest_indices);
      out.newest_layout.kv_last_page_len = out.layout.kv_last_page_len;
      out.newest_layout.first_block = reinterpret_cast<const int32_t*>(d + newest_first);
      out.newest_layout.num_seqs = b.layout.num_seqs;
      out.newest_layout.block_size = b.layout.block_size;
      out.newest_blocks = newest->newest_blocks;
    }
    out.num_tokens = static_cast<int32_t>(num_tokens);
    out.num_logits_rows = static_cast<int32_t>(b.logits_rows.size());
    out.num_sample_rows = static_cast<int32_t>(num_samples);
    const int32_t n = b.layout.num_seqs;
    int32_t decode = 0;
    while (decode < n && b.q_indptr[decode + 1] - b.q_indptr[decode] == 1) {
      out.max_kv_len = std::max(out.max_kv_len, b.layout.kv_len(decode));
      ++decode;
    }
    out.num_decode_seqs = decode;
    for (int32_t s = decode; s < n; ++s) {
      out.max_q_len = std::max(out.max_q_len, b.q_indptr[s + 1] - b.q_indptr[s]);
    }
    return out;
  }
  return Status::Internal("unreachable");
}

const uint64_t* CudaStepInputs::place_masks(const ForwardBatch& b,
                                            std::span<const int32_t> mask_row, uint64_t* masks) {
  const auto words = static_cast<size_t>(mask_words_);
  late_masks_.clear();
  for (size_t i = 0; i < b.sample_specs.size(); ++i) {
    if (mask_row[i] < 0) continue;
    uint64_t* slot = masks + static_cast<size_t>(mask_row[i]) * words;
    if (b.sample_specs[i].mask_later) {
      late_masks_.push_back(slot);
    } else {
      std::memcpy(slot, b.sample_specs[i].allowed, words * 8);
    }
  }
  return masks;
}

Result<const int32_t*> CudaStepInputs::upload_block_pairs(std::span<const kv::BlockCopy> copies,
                                                          cudaStream_t stream) {
  const size_t bytes = copies.size() * 2 * sizeof(int32_t);
  STRATA_RETURN_IF_ERROR(reserve(bytes));
  auto* host = reinterpret_cast<int32_t*>(host_.get());
  for (size_t i = 0; i < copies.size(); ++i) {
    host[2 * i] = static_cast<int32_t>(copies[i].src.value);
    host[2 * i + 1] = static_cast<int32_t>(copies[i].dst.value);
  }
  STRATA_CUDA_CHECK(cudaMemcpyAsync(device_.data(), host_.get(), bytes, cudaMemcpyHostToDevice,
                                    stream));
  return static_cast<const int32_t*>(device_.data());
}

}  // namespace strata::model

namespace strata::model {
namespace {

// The fixed layout's byte offsets for s sequences (= tokens), n block ids, r entries of the
// newest-blocks group (r = 0: no such group, each of its arrays empty) and masks of w words, last
// (a step copies only the masks it has).
struct FixedLayout {
  size_t ids, pos, q_indptr, kv_indptr, kv_indices, last_len, slots, rows, temp, top_k, top_p,
      min_p, seeds, newest_indptr, newest_indices, newest_first, newest_slots, mask_row, masks,
      total;
  FixedLayout(size_t s, size_t n, size_t r, size_t w) {
    size_t at = 0;
    auto take = [&at](size_t bytes) {
      const size_t here = at;
      at = align16(at + bytes);
      return here;
    };
    ids = take(s * 4);
    pos = take(s * 4);
    q_indptr = take((s + 1) * 4);
    kv_indptr = take((s + 1) * 4);
    kv_indices = take(n * 4);
    last_len = take(s * 4);
    slots = take(s * 8);
    rows = take(s * 4);
    temp = take(s * 4);
    top_k = take(s * 4);
    top_p = take(s * 4);
    min_p = take(s * 4);
    seeds = take(s * 8);
    const size_t newest_s = r > 0 ? s : 0;
    newest_indptr = take(r > 0 ? (s + 1) * 4 : 0);
    newest_indices = take(r * 4);
    newest_first = take(newest_s * 4);
    newest_slots = take(newest_s * 8);
    mask_row = take(s * 4);
    masks = take(s * w * 8);
    total = at;
  }
};

// Newest-blocks entries a fixed input set holds per sequence for R (0 without that group).
size_t fixed_newest_per_seq(int32_t r) { return r > 0 ? static_cast<size_t>(r) + 1 : 0; }

// The newest-blocks group's arrays of a fixed input set at h: the batch's entries (view), then
// padded sequences with none (first_block 0) whose one token's slot is -1.
void pack_fixed_newest(const ForwardBatch& b, const GroupBatchView& view, const FixedLayout& l,
                       size_t padded, std::byte* h) {
  const PagedKvLayout& g = view.layout;
  auto* indptr = reinterpret_cast<int32_t*>(h + l.newest_indptr);
  auto* first = reinterpret_cast<int32_t*>(h + l.newest_first);
  auto* slots = reinterpret_cast<int64_t*>(h + l.newest_slots);
  const auto n = static_cast<size_t>(b.layout.num_seqs);
  const auto nnz = static_cast<size_t>(g.kv_indptr[n]);
  std::memcpy(h + l.newest_indices, g.kv_indices, nnz * 4);
  indptr[0] = 0;
  for (size_t s = 0; s < padded; ++s) {
    const bool real = s < n;
    indptr[s + 1] = real ? g.kv_indptr[s + 1] : static_cast<int32_t>(nnz);
    first[s] = real ? g.first_block[s] : 0;
    slots[s] = real ? view.slot_mapping[s] : -1;
  }
}

}  // namespace

Result<CudaStepInputs> CudaStepInputs::create_fixed(int32_t max_num_seqs,
                                                    int32_t max_blocks_per_seq,
                                                    int32_t vocab_size, int32_t newest_blocks) {
  CudaStepInputs in;
  in.mask_words_ = (int64_t{vocab_size} + 63) / 64;
  const auto seqs = static_cast<size_t>(max_num_seqs);
  const FixedLayout l(seqs, seqs * static_cast<size_t>(max_blocks_per_seq),
                      seqs * fixed_newest_per_seq(newest_blocks),
                      static_cast<size_t>(in.mask_words_));
  STRATA_RETURN_IF_ERROR(in.reserve(l.total));
  in.fixed_seqs_ = max_num_seqs;
  in.fixed_blocks_per_seq_ = max_blocks_per_seq;
  in.fixed_newest_blocks_ = newest_blocks;
  return in;
}

bool CudaStepInputs::fits_fixed(const ForwardBatch& b) const {
  const int32_t n = b.layout.num_seqs;
  const GroupBatchView* newest = newest_view(b);
  const int32_t newest_blocks = newest != nullptr ? newest->newest_blocks : 0;
  if (fixed_seqs_ == 0 || n > fixed_seqs_ || !b.logits_rows.empty() ||
      static_cast<int32_t>(b.token_ids.size()) != n ||
      static_cast<int32_t>(b.sample_rows.size()) != n || newest_blocks != fixed_newest_blocks_) {
    return false;
  }
  const auto newest_per_seq = static_cast<int32_t>(fixed_newest_per_seq(fixed_newest_blocks_));
  for (int32_t s = 0; s < n; ++s) {
    if (b.sample_rows[static_cast<size_t>(s)] != s || b.q_indptr[static_cast<size_t>(s) + 1] != s + 1 ||
        b.layout.num_blocks(s) > fixed_blocks_per_seq_) {
      return false;
    }
    if (newest_per_seq > 0 && newest->layout.num_blocks(s) > newest_per_seq) return false;
  }
  return true;
}

Result<CudaStepInputs::Device> CudaStepInputs::upload_fixed(const ForwardBatch& b,
                                                            int32_t padded_seqs, int32_t kv_bound,
                                                            cudaStream_t stream) {
  late_masks_.clear();
  const auto cap = static_cast<size_t>(fixed_seqs_);
  const auto words = static_cast<size_t>(mask_words_);
  const FixedLayout l(cap, cap * static_cast<size_t>(fixed_blocks_per_seq_),
                      cap * fixed_newest_per_seq(fixed_newest_blocks_), words);
  const auto n = static_cast<size_t>(b.layout.num_seqs);
  const auto padded = static_cast<size_t>(padded_seqs);
  std::byte* h = host_.get();
  auto at = [h](size_t offset) { return h + offset; };
  auto* ids = reinterpret_cast<int32_t*>(at(l.ids));
  auto* pos = reinterpret_cast<int32_t*>(at(l.pos));
  auto* q_indptr = reinterpret_cast<int32_t*>(at(l.q_indptr));
  auto* kv_indptr = reinterpret_cast<int32_t*>(at(l.kv_indptr));
  auto* last_len = reinterpret_cast<int32_t*>(at(l.last_len));
  auto* slots = reinterpret_cast<int64_t*>(at(l.slots));
  auto* rows = reinterpret_cast<int32_t*>(at(l.rows));
  auto* temp = reinterpret_cast<float*>(at(l.temp));
  auto* top_k = reinterpret_cast<int32_t*>(at(l.top_k));
  auto* top_p = reinterpret_cast<float*>(at(l.top_p));
  auto* min_p = reinterpret_cast<float*>(at(l.min_p));
  auto* seeds = reinterpret_cast<uint64_t*>(at(l.seeds));
  const auto nnz = static_cast<size_t>(b.layout.kv_indptr[n]);
  std::memcpy(at(l.kv_indices), b.layout.kv_indices, nnz * 4);
  q_indptr[0] = 0;
  kv_indptr[0] = 0;
  for (size_t s = 0; s < padded; ++s) {
    const bool real = s < n;
    ids[s] = real ? b.token_ids[s] : 0;
    pos[s] = real ? b.positions[s] : 0;
    q_indptr[s + 1] = static_cast<int32_t>(s + 1);
    kv_indptr[s + 1] = real ? b.layout.kv_indptr[s + 1] : static_cast<int32_t>(nnz);
    last_len[s] = real ? b.layout.kv_last_page_len[s] : 1;
    slots[s] = real ? b.slot_mapping[s] : -1;
    rows[s] = static_cast<int32_t>(s);
    const DeviceSampleSpec spec = real ? b.sample_specs[s] : DeviceSampleSpec{.temperature = 0.0f};
    temp[s] = spec.temperature;
    top_k[s] = spec.top_k;
    top_p[s] = spec.top_p;
    min_p[s] = spec.min_p;
    seeds[s] = spec.seed;
  }
  // fits_fixed: a newest-blocks group exactly when the fixed set has room for one.
  const GroupBatchView* newest = newest_view(b);
  const bool int4 = fixed_newest_blocks_ > 0;
  if (int4) pack_fixed_newest(b, *newest, l, padded, h);
  std::vector<int32_t> mask_row;
  const int32_t num_masked = mask_rows(b, mask_row);
  mask_row.resize(padded, -1);  // padded rows: unmasked
  std::memcpy(at(l.mask_row), mask_row.data(), padded * 4);
  // The masks are last, and stay in the pinned buffer (place_masks).
  STRATA_CUDA_CHECK(cudaMemcpyAsync(device_.data(), host_.get(), l.masks, cudaMemcpyHostToDevice,
                                    stream));
  const std::byte* d = static_cast<const std::byte*>(device_.data());
  Device out;
  out.token_ids = reinterpret_cast<const int32_t*>(d + l.ids);
  out.positions = reinterpret_cast<const int32_t*>(d + l.pos);
  out.q_indptr = reinterpret_cast<const int32_t*>(d + l.q_indptr);
  out.slot_mapping = reinterpret_cast<const int64_t*>(d + l.slots);
  out.logits_rows = reinterpret_cast<const int32_t*>(d + l.rows);
  out.temperature = reinterpret_cast<const float*>(d + l.temp);
  out.top_k = reinterpret_cast<const int32_t*>(d + l.top_k);
  out.top_p = reinterpret_cast<const float*>(d + l.top_p);
  out.min_p = reinterpret_cast<const float*>(d + l.min_p);
  out.seeds = reinterpret_cast<const uint64_t*>(d + l.seeds);
  if (num_masked > 0) {
    out.mask_row = reinterpret_cast<const int32_t*>(d + l.mask_row);
    out.masks = place_masks(b, mask_row, reinterpret_cast<uint64_t*>(at(l.masks)));
    out.mask_words = mask_words_;
  }
  out.layout.kv_indptr = reinterpret_cast<const int32_t*>(d + l.kv_indptr);
  out.layout.kv_indices = reinterpret_cast<const int32_t*>(d + l.kv_indices);
  out.layout.kv_last_page_len = reinterpret_cast<const int32_t*>(d + l.last_len);
  out.layout.num_seqs = padded_seqs;
  out.layout.block_size = b.layout.block_size;
  if (int4) {
    out.newest_slot_mapping = reinterpret_cast<const int64_t*>(d + l.newest_slots);
    out.newest_layout.kv_indptr = reinterpret_cast<const int32_t*>(d + l.newest_indptr);
    out.newest_layout.kv_indices = reinterpret_cast<const int32_t*>(d + l.newest_indices);
    out.newest_layout.kv_last_page_len = out.layout.kv_last_page_len;
    out.newest_layout.first_block = reinterpret_cast<const int32_t*>(d + l.newest_first);
    out.newest_layout.num_seqs = padded_seqs;
    out.newest_layout.block_size = b.layout.block_size;
    out.newest_blocks = fixed_newest_blocks_;
  }
  out.num_tokens = padded_seqs;
  out.num_logits_rows = 0;
  out.num_sample_rows = padded_seqs;
  out.num_decode_seqs = padded_seqs;
  out.max_q_len = 0;
  out.max_kv_len = kv_bound;
  return out;
}

}  // namespace strata::model
