// The training loop's input path on the CPU: batches assembled in the backend's input memory, taken one
// ahead and uploaded (InputFeed), the idle-wait rule that counts input stall on a GPU, the recycling
// memory resource that keeps a GPU's page-locked batches, and the decoding threads sized to the node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <set>
#include <thread>

#include "trainer/backend.hpp"
#include "trainer/data/batch_loader.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/prefetcher.hpp"
#include "trainer/data/shard.hpp"
#include "trainer/input_feed.hpp"
#include "trainer/recycling_memory.hpp"
#include "trainer/run_defaults.hpp"

namespace fanstore::trainer {
namespace {

// Sample i: input element k is i * 1000 + k, target i.
class CountingDataset final : public data::SampleDataset {
 public:
  explicit CountingDataset(std::size_t n) : n_(n) {
    layout_.input_shape = {2, 3, 4};
    layout_.target_kind = data::TargetKind::kClassIndex;
  }
  std::size_t size() const override { return n_; }
  const data::SampleLayout& layout() const override { return layout_; }
  std::string sample_path(std::size_t index) const override { return "sample" + std::to_string(index); }
  void load_sample(std::size_t index, std::uint64_t, const data::SampleBuffers& out) const override {
    for (std::size_t k = 0; k < layout_.input_elements(); ++k) out.input[k] = static_cast<float>(index * 1000 + k);
    out.target_labels[0] = static_cast<std::int32_t>(index);
  }

 private:
  std::size_t n_;
  data::SampleLayout layout_;
};

// Samples 0..n-1 in batches of `per` (the last one shorter).
std::vector<std::vector<std::size_t>> batches_of(std::size_t n, std::size_t per) {
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  return data::split_into_batches(all, per);
}

RecyclingMemory counted_memory(int* gets, int* puts) {
  return RecyclingMemory(
      [gets](std::size_t bytes) {
        ++*gets;
        return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      },
      [puts](void* p, std::size_t) {
        ++*puts;
        std::free(p);
      });
}

TEST(InputFeed, HandsOutEveryBatchInOrderWithItsInputInTheBackendsMemory) {
  auto backend = make_cpu_backend({1});
  const CountingDataset dataset(30);
  int gets = 0, puts = 0;
  {
    RecyclingMemory memory = counted_memory(&gets, &puts);
    const data::BatchLoader loader(dataset, {.input_memory = &memory});
    data::Prefetcher prefetcher(loader, batches_of(30, 3), 0, {.threads = 2, .queue_depth = 2});
    InputFeed feed(*backend, prefetcher);
    std::size_t number = 0;
    while (auto fed = feed.next()) {
      EXPECT_EQ(fed->batch.number, number);
      EXPECT_EQ(fed->batch.input.get_allocator().resource(), &memory);
      // On the CPU the upload is the batch's own memory, with the batch's shape.
      EXPECT_EQ(fed->input.data(), fed->batch.input.data());
      EXPECT_EQ(fed->input.shape(), Shape(fed->batch.input_shape));
      for (std::size_t s = 0; s < fed->batch.sample_indices.size(); ++s)
        EXPECT_EQ(fed->input.data()[s * 24 + 5], static_cast<float>(fed->batch.sample_indices[s] * 1000 + 5));
      if (number % 2 == 0) feed.take_ahead();  // as the loop does while a step runs; next() takes it then
      ++number;
    }
    EXPECT_EQ(number, 10u);
    EXPECT_FALSE(feed.next());
    // Blocks come back and are used again: at most the window, the one taken ahead and the one in use (10
    // batches without reuse).
    EXPECT_LE(memory.blocks_obtained(), 5u);
  }
  EXPECT_EQ(gets, puts);  // every block returned upstream when the resource goes
}

TEST(InputFeed, ABatchThatFailsToLoadFailsTheStepThatWouldUseIt) {
  // Sample 4 is bad: batch 2 (samples 4, 5) cannot be loaded. Taking it ahead during step 1 must not
  // throw there (step 1's metrics and checkpoint come after); next() for step 2 throws its error.
  struct Bad final : data::SampleDataset {
    CountingDataset inner{6};
    std::size_t size() const override { return inner.size(); }
    const data::SampleLayout& layout() const override { return inner.layout(); }
    std::string sample_path(std::size_t i) const override { return inner.sample_path(i); }
    void load_sample(std::size_t i, std::uint64_t seed, const data::SampleBuffers& out) const override {
      if (i == 4) throw data::DataError(sample_path(i), "unreadable");
      inner.load_sample(i, seed, out);
    }
  } bad;
  auto backend = make_cpu_backend({1});
  const data::BatchLoader loader(bad, {});
  data::Prefetcher prefetcher(loader, batches_of(6, 2), 0, {.threads = 1, .queue_depth = 2});
  InputFeed feed(*backend, prefetcher);
  ASSERT_TRUE(feed.next());
  feed.take_ahead();
  ASSERT_TRUE(feed.next());
  EXPECT_NO_THROW(feed.take_ahead());
  EXPECT_THROW(feed.next(), data::DataError);
}

TEST(InputFeed, CountsOnlyTheWaitAfterTheDeviceWentIdle) {
  // A fake clock that each 1 ms poll advances by 1 ms: the batch is ready after 30 ms.
  double t = 0;
  const auto now = [&] { return t; };
  const auto ready_at = [&](double when) {
    return [&t, when](std::chrono::microseconds poll) {
      if (t >= when) return true;
      t += std::chrono::duration<double>(poll).count();
      return false;
    };
  };
  EXPECT_NEAR(idle_wait(
                  ready_at(0.030), [] { return true; }, now),
              0.030, 1e-9);  // the CPU: all of it
  t = 0;
  EXPECT_EQ(idle_wait(
                ready_at(0.030), [] { return false; }, now),
            0.0);  // busy throughout: none
  t = 0;
  EXPECT_NEAR(idle_wait(
                  ready_at(0.030), [&] { return t >= 0.020; }, now),
              0.010, 1e-9);  // idle after 20 ms
  t = 0;
  EXPECT_EQ(idle_wait(
                ready_at(0.0), [] { return true; }, now),
            0.0);  // ready at once
}

TEST(InputFeed, WaitReadySaysWhenNextWouldNotBlock) {
  // A dataset that holds every load until released: wait_ready times out until the first batch is in.
  struct Gate final : data::SampleDataset {
    CountingDataset inner{4};
    mutable std::atomic<bool> open{false};
    std::size_t size() const override { return inner.size(); }
    const data::SampleLayout& layout() const override { return inner.layout(); }
    std::string sample_path(std::size_t i) const override { return inner.sample_path(i); }
    void load_sample(std::size_t i, std::uint64_t seed, const data::SampleBuffers& out) const override {
      while (!open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      inner.load_sample(i, seed, out);
    }
  } gate;
  const data::BatchLoader loader(gate, {});
  data::Prefetcher prefetcher(loader, batches_of(4, 2), 0, {.threads = 1, .queue_depth = 2});
  EXPECT_FALSE(prefetcher.wait_ready(std::chrono::milliseconds(5)));
  gate.open = true;
  EXPECT_TRUE(prefetcher.wait_ready(std::chrono::seconds(60)));
  EXPECT_TRUE(prefetcher.next());
  EXPECT_TRUE(prefetcher.wait_ready(std::chrono::seconds(60)));
  EXPECT_TRUE(prefetcher.next());
  EXPECT_TRUE(prefetcher.wait_ready(std::chrono::milliseconds(0)));  // none left: next() returns at once
  EXPECT_FALSE(prefetcher.next());
  // Without workers next() decodes itself: always ready.
  data::Prefetcher inline_decode(loader, batches_of(4, 2), 0, {.threads = 0, .queue_depth = 2});
  EXPECT_TRUE(inline_decode.wait_ready(std::chrono::milliseconds(0)));
}

TEST(RecyclingMemory, GivesFreedBlocksOfTheSameSizeBackAndReturnsAllAtTheEnd) {
  int gets = 0, puts = 0;
  {
    RecyclingMemory memory = counted_memory(&gets, &puts);
    void* a = memory.allocate(4096, 64);
    void* b = memory.allocate(8192, 64);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
    memory.deallocate(a, 4096, 64);
    EXPECT_EQ(memory.allocate(4096, 64), a);  // the same block again
    void* c = memory.allocate(4096, 64);      // none kept: a new one
    EXPECT_NE(c, a);
    EXPECT_EQ(memory.blocks_obtained(), 3u);
    memory.deallocate(a, 4096, 64);
    memory.deallocate(b, 8192, 64);
    memory.deallocate(c, 4096, 64);
    EXPECT_EQ(memory.blocks_kept(), 3u);
    EXPECT_EQ(puts, 0);                                            // kept, not returned upstream
    EXPECT_THROW((void)memory.allocate(64, 128), std::bad_alloc);  // more alignment than upstream promises
  }
  EXPECT_EQ(gets, 3);
  EXPECT_EQ(puts, 3);
}

TEST(RecyclingMemory, KeepsNoMoreThanTheMostEverInUseAndFitsWithinAQuarter) {
  int gets = 0, puts = 0;
  RecyclingMemory memory = counted_memory(&gets, &puts);
  void* big = memory.allocate(8192, 64);
  memory.deallocate(big, 8192, 64);
  EXPECT_EQ(memory.bytes_kept(), 8192u);  // within the peak (8 KiB in use once)
  // 4 KiB: the kept 8 KiB block is more than a quarter larger, and both together would exceed the peak:
  // the kept one goes back first.
  void* small = memory.allocate(4096, 64);
  EXPECT_EQ(puts, 1);
  EXPECT_EQ(memory.bytes_kept(), 0u);
  memory.deallocate(small, 4096, 64);
  // A kept block up to a quarter larger serves a smaller request, and comes back at its own size.
  void* fitted = memory.allocate(3500, 64);
  EXPECT_EQ(fitted, small);
  memory.deallocate(fitted, 3500, 64);
  EXPECT_EQ(memory.bytes_kept(), 4096u);
  EXPECT_EQ(memory.peak_bytes_in_use(), 8192u);
  memory.release_kept();  // back upstream, and the peak is learnt again
  EXPECT_EQ(memory.bytes_kept(), 0u);
  EXPECT_EQ(memory.peak_bytes_in_use(), 0u);
  EXPECT_EQ(gets, puts);
}

// Memory that could not be had leaves no trace: not in use, and not a peak that would let freed blocks be kept.
TEST(RecyclingMemory, AFailedGetLeavesTheCountsAsTheyWere) {
  bool fail = false;
  RecyclingMemory memory(
      [&fail](std::size_t bytes) -> void* {
        if (fail) throw std::bad_alloc();
        return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      },
      [](void* p, std::size_t) { std::free(p); });
  void* a = memory.allocate(4096, 64);
  fail = true;
  EXPECT_THROW((void)memory.allocate(1 << 20, 64), std::bad_alloc);
  EXPECT_EQ(memory.peak_bytes_in_use(), 4096u);
  memory.deallocate(a, 4096, 64);
  EXPECT_EQ(memory.bytes_kept(), 4096u);
  EXPECT_EQ(memory.blocks_obtained(), 1u);
}

TEST(RecyclingMemory, ThreadsSharingItNeverGetOneBlockTwice) {
  int gets = 0, puts = 0;
  RecyclingMemory memory = counted_memory(&gets, &puts);
  std::mutex mutex;
  std::set<void*> live;
  bool twice = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        void* p = memory.allocate(1024, 64);
        {
          std::lock_guard lock(mutex);
          twice |= !live.insert(p).second;
        }
        {
          std::lock_guard lock(mutex);
          live.erase(p);
        }
        memory.deallocate(p, 1024, 64);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(twice);
  EXPECT_LE(memory.blocks_obtained(), 4u);  // at most one per thread in use at a time
}

TEST(DecodeThreads, SizedToTheRanksShareOfTheNodeOnAGpu) {
  EXPECT_EQ(decode_threads(5, true, 64, 64, 4), 5);    // asked for
  EXPECT_EQ(decode_threads(0, false, 64, 64, 4), 2);   // the CPU: the compute threads take the cores
  EXPECT_EQ(decode_threads(0, true, 64, 64, 4), 15);   // unbound: 64 cores / 4 ranks, less the driving one
  EXPECT_EQ(decode_threads(0, true, 16, 64, 4), 15);   // bound to its 16 cores
  EXPECT_EQ(decode_threads(0, true, 64, 64, -1), 32);  // ranks per node unknown: capped
  EXPECT_EQ(decode_threads(0, true, 2, 2, 1), 2);      // at least 2
}

}  // namespace
}  // namespace fanstore::trainer
