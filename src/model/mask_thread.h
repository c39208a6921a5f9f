#pragma once
// MaskThread: makes a step's structured-output masks (ForwardBatch::fill_masks) on a thread of
// its own while the device runs the step, and then tells the device they are there.
//
// The step's launches read the masks after cuda::wait_host_signal over signal (two pinned words:
// [0] the step's number, [1] the number of the last step whose masks are written):
//
//   step thread   arm(): signal[0] = ++step        launches ... wait_host_signal, mask, sample
//                 start(fill, masks) or release()  collect the draws (waits for the device)
//                 finish()
//   mask thread   fill(masks), then signal[1] = step
//
// The fill runs on this thread, never the step thread's, because the step thread may block on
// the stream (a copy to pageable memory, a wait) behind the wait kernel, which only the signal
// ends. finish() returns once the fill has returned and the signal is set; every step that
// armed must reach it (forward() calls it on every path out), or its wait kernel spins forever.
//
// One step at a time, from one thread (the runner's step thread).

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>

namespace strata::model {

class MaskThread {
 public:
  using Fill = std::function<void(std::span<uint64_t* const>)>;

  // signal: two words of pinned host memory, valid for the thread's life.
  explicit MaskThread(uint32_t* signal);
  ~MaskThread();
  MaskThread(const MaskThread&) = delete;
  MaskThread& operator=(const MaskThread&) = delete;

  // Begins a step: the device's wait kernels of it wait for this step's signal.
  void arm();
  // fill(masks) on the thread, then the signal. fill must not throw; masks must stay valid until
  // finish().
  void start(Fill fill, std::span<uint64_t* const> masks);
  // Nothing to fill: the signal now.
  void release();
  // Waits for a started fill and its signal; signals first if neither start() nor release() ran.
  void finish();

 private:
  void run();
  void signal_reached();

  uint32_t* const signal_;
  uint32_t step_ = 0;
  std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  Fill fill_;
  std::span<uint64_t* const> masks_;
  bool pending_ = false;   // a fill handed over, not yet done
  bool signalled_ = true;  // the armed step's signal is set
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::model
