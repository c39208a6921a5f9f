#pragma once
// What the engine reports about itself as it runs: each step's figures (EngineStepStats), the
// running totals (EngineTotals) and each KV cache group's pool (KvGroupStats).

#include <cstdint>
#include <string>

#include "strata/latency_histogram.h"

namespace strata {

// One KV cache group (docs/kv.md, "KV cache groups"): what it keeps of a sequence, and its pool.
struct KvGroupStats {
  std::string kind;           // "full attention", "sliding window" or "newest blocks"
  int32_t window = 0;         // sliding window: positions a query reads
  int32_t newest_blocks = 0;  // newest blocks (INT4's full-precision blocks): R
  int32_t num_blocks = 0;     // the null block included
  int32_t num_used_blocks = 0;
  int64_t block_bytes = 0;  // one block of the group's pool (its layers, K and V, scales)
  int64_t pool_bytes() const { return block_bytes * num_blocks; }
};

// What the last step did, and the engine's state after it.
struct EngineStepStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t num_swapped = 0;
  int32_t num_scheduled_seqs = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_preempted = 0;      // this step
  double schedule_seconds = 0.0;  // scheduling and batch building, not the forward pass
  // The runner's part: copy-on-write copies and the forward pass, until the step's tokens (or
  // logits) are back on the host; 0 when nothing ran. step_seconds less this and
  // schedule_seconds is the host's own work after the forward pass (sampling on the host,
  // stop checks, outputs).
  double forward_seconds = 0.0;
  double step_seconds = 0.0;  // the whole step
  int32_t num_used_blocks = 0;
  int32_t num_free_blocks = 0;
  // Blocks the prefix cache holds (full blocks indexed by their hash, in use or freed and
  // evictable); 0 with prefix caching off.
  int32_t num_cached_blocks = 0;
  int64_t live_token_slots = 0;  // tokens in the pool (shared blocks once)
  int64_t capacity_token_slots = 0;
};

struct EngineTotals {
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_swapped_out_blocks = 0;
  int64_t num_swapped_in_blocks = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t num_evictions = 0;
  // Token eviction (docs/kv-eviction.md): blocks taken from sequences' tables (block-wise
  // policies), and single tokens (token-level policies, H2O and SnapKV).
  int64_t num_kv_evicted_blocks = 0;
  int64_t num_kv_evicted_tokens = 0;
  // KV tiers (EngineConfig::kv_offload_bytes): evicted blocks written to host memory, host blocks
  // written down to disk, prompt tokens brought back from each tier (part of
  // num_cached_prompt_tokens), and blocks that failed a check or an I/O and were recomputed.
  int64_t kv_offloaded_blocks = 0;
  int64_t kv_disk_written_blocks = 0;
  int64_t kv_host_tier_hit_tokens = 0;
  int64_t kv_disk_tier_hit_tokens = 0;
  int64_t kv_tier_faults = 0;
  // The remote tier (EngineConfig::kv_remote_urls): blocks Redis brought into host memory, and of
  // them the prompt tokens served (part of kv_host_tier_hit_tokens); blocks written, and writes
  // dropped (queue full, server not answering), and not written because another instance had
  // written them already; reads that got no answer (from some server).
  int64_t kv_remote_fetched_blocks = 0;
  int64_t kv_remote_hit_tokens = 0;
  int64_t kv_remote_written_blocks = 0;
  int64_t kv_remote_present_blocks = 0;
  int64_t kv_remote_dropped_writes = 0;
  int64_t kv_remote_errors = 0;
  // Blocks not read from Redis because computing them was expected to end sooner, and requests
  // admitted before their reads ended (EngineConfig::kv_remote_read_always off).
  int64_t kv_remote_skipped_blocks = 0;
  int64_t kv_remote_overdue_requests = 0;
  // Bytes of values read from Redis (checked or not) and written to it; how long each read (the
  // prefixes of the requests queued since the last read, every server's round trip together) and
  // each write of a batch (up to 64 blocks: which keys are there, then the SETs) took, answered or
  // not.
  int64_t kv_remote_read_bytes = 0;
  int64_t kv_remote_written_bytes = 0;
  LatencyHistogram kv_remote_get_latency = {};
  LatencyHistogram kv_remote_put_latency = {};
  // Disaggregation (EngineConfig::kv_role). A decode instance: blocks read from the prefill
  // instance and checked (the prompt tokens they served count in kv_remote_hit_tokens), their
  // bytes, blocks that failed a check or did not come within kv_peer_wait_ms, and round trips
  // that failed (no answer, no connection). A prefill instance: blocks and bytes served to decode
  // instances, and blocks its outbox dropped (its coder behind).
  int64_t kv_peer_read_blocks = 0;
  int64_t kv_peer_read_bytes = 0;
  int64_t kv_peer_faults = 0;
  int64_t kv_peer_errors = 0;
  int64_t kv_peer_served_blocks = 0;
  int64_t kv_peer_served_bytes = 0;
  int64_t kv_peer_dropped_blocks = 0;
  // Of kv_peer_read_blocks, those copied out of the prefill instance's region (kv_peer_region),
  // and slot records whose slot was taken again during the copy (counted in kv_peer_faults).
  int64_t kv_peer_region_read_blocks = 0;
  int64_t kv_peer_region_reused = 0;
  // Of kv_peer_region_read_blocks, those copied straight into the KV pool (device to device on
  // a GPU) rather than through a host slot.
  int64_t kv_peer_region_pool_blocks = 0;
  // Each read of the prefill instance (the blocks of the requests queued since the last one,
  // waits for blocks not there yet included).
  LatencyHistogram kv_peer_get_latency = {};
  // Of the reads' time, the round trips that brought blocks (kv::PeerSourceStats): the
  // transfer's own time, without the waits for the prefill instance.
  double kv_peer_transfer_seconds = 0.0;
  // KV events (EngineConfig::kv_events_endpoint): blocks named by the events handed to the
  // publisher (a BlockStored or BlockRemoved counts each of its blocks, an AllBlocksCleared one),
  // and those dropped with their batch because the publisher's queue was full.
  int64_t kv_events_published_blocks = 0;
  int64_t kv_events_dropped_blocks = 0;
  // Blocks a prefetch brought from disk to host memory while their request waited; evicted
  // blocks no host slot could take; the I/O threads' time reading blocks, and the scheduler
  // thread's time waiting for them (the load time the prefetch did not hide).
  int64_t kv_prefetched_blocks = 0;
  int64_t kv_dropped_blocks = 0;
  double kv_disk_read_seconds = 0.0;
  double kv_io_wait_seconds = 0.0;
  // Time copying blocks down into host memory (with their checksums) and checking and copying
  // them up into the pool, on the scheduler thread.
  double kv_tier_down_seconds = 0.0;
  double kv_tier_up_seconds = 0.0;
};

}  // namespace strata
