// Generator's step: build one forward batch from the unfinished sequences (a first prefill starts
// after the sequence's longest cached prefix), run the copy-on-write copies and the forward pass,
// and consume the logits (prompt logprobs, sampling, stop checks, registering newly full blocks in
// the prefix cache, freeing finished sequences' blocks).

#include <algorithm>
#include <chrono>

#include "engine/generator.h"
#include "kv/block_copy.h"
#include "engine/step_batch.h"

namespace strata::engine {
namespace {

// Where one sequence's rows sit in the step.
struct Scheduled {
  size_t seq_idx;
  int32_t first_pos;    // position of the sequence's first token in this step
  int32_t num_tokens;   // tokens it runs this step
  int32_t first_logits_row;  // index into the step's logits rows, or -1 when it wants none
};

}  // namespace

Result<int32_t> Generator::schedule(Sequence& s, int32_t& prefill_budget) {
  kv::PrefixHit hit;
  // Look the prefix up when the prompt can start, so it sees what earlier steps cached.
  if (!s.prefix_looked_up && prefill_budget > 0) {
    s.prefix_looked_up = true;
    // Sequences that want every prompt position's logits compute them all.
    if (!s.wants_all_rows() && s.num_computed == 0) {
      hit = cache_->find_cached_prefix({s.tokens.data(), static_cast<size_t>(s.num_prompt)},
                                       s.cache_keys);
    }
  }
  const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - s.num_computed - hit.num_tokens;
  const bool decode = remaining == 1 && s.num_computed >= s.num_prompt;
  const int32_t n = decode ? 1 : std::min(remaining, prefill_budget);
  if (n == 0 && hit.blocks.empty()) return 0;
  // The step's first query is at num_computed: blocks before its window are never read again.
  cache_->free_blocks_outside_window(s.table);
  if (!cache_->allocate_slots(s.table, n, &hit)) {
    return Status::ResourceExhausted("the KV cache has too few free blocks for this batch");
  }
  s.num_computed += hit.num_tokens;
  stats_.num_cached_prompt_tokens += hit.num_tokens;
  if (!decode) prefill_budget -= n;
  return n;
}

Status Generator::step(std::vector<Sequence>& seqs) {
  const auto start = std::chrono::steady_clock::now();
  int64_t num_prefill = 0, num_decode = 0;
  StepBatch batch(config_.block_size, residual_blocks_);
  std::vector<Scheduled> scheduled;
  int32_t prefill_budget = config_.max_num_batched_tokens;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = seqs[i];
    if (s.finished) continue;
    Result<int32_t> scheduled_tokens = schedule(s, prefill_budget);
    if (!scheduled_tokens.ok()) return scheduled_tokens.status();
    const int32_t n = *scheduled_tokens;
    if (n == 0) continue;
    (s.num_computed >= s.num_prompt ? num_decode : num_prefill) += n;
    const int32_t first_row = batch.add(s, n);
    scheduled.push_back({i, s.num_computed, n, first_row});
  }
  stats_.peak_used_blocks = std::max(stats_.peak_used_blocks, cache_->pool().num_used_blocks());
  kv::copy_blocks(*kv_, cache_->take_pending_copies());  // copy-on-write, before any KV write
  if (residual_) kv::copy_blocks(*residual_, cache_->take_pending_residual_copies());
  const auto vocab = static_cast<size_t>(model_.vocab_size());
  logits_.resize(batch.num_logits_rows() * vocab);
  STRATA_RETURN_IF_ERROR(model_.forward(batch.view(), *kv_, logits_, pool_, residual_.get()));
  for (const Scheduled& sc : scheduled) {
    const float* rows = sc.first_logits_row < 0
                            ? nullptr
                            : logits_.data() + static_cast<size_t>(sc.first_logits_row) * vocab;
    STRATA_RETURN_IF_ERROR(consume_logits(seqs[sc.seq_idx], sc.first_pos, sc.num_tokens, rows));
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  (num_prefill > 0 ? stats_.prefill_seconds : stats_.decode_seconds) += elapsed.count();
  stats_.num_prefill_tokens += num_prefill;
  stats_.num_decode_tokens += num_decode;
  ++stats_.num_steps;
  return Status::Ok();
}

// logits: this step's rows for the sequence (every row when wants_all_rows(), else only the last
// row when the step completes its tokens, else nullptr).
Status Generator::consume_logits(Sequence& s, int32_t first_pos, int32_t num_rows,
                                 const float* logits) {
  const auto vocab = static_cast<size_t>(model_.vocab_size());
  if (s.all_logits) s.logits.insert(s.logits.end(), logits, logits + num_rows * vocab);
  if (s.params.prompt_logprobs >= 0) {
    // The logits at position p score prompt token p + 1.
    for (int32_t j = 0; j < num_rows; ++j) {
      const int32_t next = first_pos + j + 1;
      if (next >= s.num_prompt) break;
      s.result.prompt_logprobs[static_cast<size_t>(next)] = compute_logprobs(
          {logits + j * vocab, vocab}, s.tokens[static_cast<size_t>(next)], s.params.prompt_logprobs);
    }
  }
  s.num_computed += num_rows;
  cache_->cache_full_blocks(s.table, s.tokens, s.num_computed, s.cache_keys);
  cache_->free_residual_before(s.table, s.num_computed);  // INT4: what no later query reads
  if (s.num_computed < static_cast<int32_t>(s.tokens.size())) return Status::Ok();
  if (s.all_logits) {
    s.finished = true;
  } else {
    const float* last = logits + (s.wants_all_rows() ? (num_rows - 1) * vocab : 0);
    Result<SampleResult> sampled = s.sampler->sample({last, vocab}, s.counts);
    if (!sampled.ok()) return sampled.status();
    const int32_t token = sampled->token;
    s.tokens.push_back(token);
    s.counts.add_output(token);
    s.result.output_ids.push_back(token);
    if (s.params.logprobs >= 0) {
      s.result.output_logprobs.push_back(
          TokenLogprobs{token, sampled->logprob, std::move(sampled->top_logprobs)});
    }
    if (is_stop_token(token, s.params, config_.eos_token_ids)) {
      s.result.finish_reason = FinishReason::kStop;
      s.finished = true;
    } else if (static_cast<int32_t>(s.result.output_ids.size()) >= s.params.max_tokens) {
      s.result.finish_reason = FinishReason::kLength;
      s.finished = true;
    }
  }
  if (s.finished) cache_->free(s.table);
  return Status::Ok();
}

}  // namespace strata::engine
