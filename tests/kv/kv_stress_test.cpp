// Randomized stress test: thousands of seeded random operations (admit, prefill chunks, decode
// growth, release, clear) against a reference model. After every operation:
//  * check_invariants(): ref counts = table occurrences, free + cached + used = total, LRU =
//    unreferenced cached leaves in tick order, tree rows = the sequences' computed tokens;
//  * every computed position of every running sequence reads the K/V of its own prefix from
//    the shadow storage (so no slot was handed to two writers, no copy was missed or wrong);
//  * without eviction, n_cached equals the longest common prefix with any computed sequence
//    (capped at n_prompt - 1); with eviction it is at most that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

using namespace efim;
using namespace efim::kvtest;
using V = std::vector<int32_t>;

namespace {

struct Config {
  int32_t n_blocks;
  int32_t block_size;
  int32_t vocab;  // small, so prompts share prefixes often
  int32_t n_ops;
  bool expect_no_eviction;
};

class Stress {
 public:
  Stress(const Config& c, uint64_t seed)
      : c_(c),
        rng_(seed),
        kv_({.n_blocks = c.n_blocks, .block_size = c.block_size}),
        sh_(kv_, c.n_blocks) {}

  void run() {
    for (int32_t op = 0; op < c_.n_ops; ++op) {
      int32_t what = pick(0, 99);
      if (int32_t(running_.size()) >= 32) what = 90;  // keep the audits cheap
      if (what < 30 || running_.empty())
        admit();
      else if (what < 80)
        step(running_[pick(0, int32_t(running_.size()) - 1)]);
      else if (what < 99)
        finish(running_[pick(0, int32_t(running_.size()) - 1)]);
      else
        clear();
      ASSERT_NO_THROW(kv_.check_invariants()) << "after op " << op;
      for (SeqId id : running_) ASSERT_TRUE(sh_.holds(id, kv_.n_computed(id))) << "op " << op;
      min_free_ = std::min(min_free_, kv_.stats().free_blocks);
      if (c_.expect_no_eviction) {
        ASSERT_GT(kv_.stats().free_blocks, 0) << "pool too small for the no-eviction check";
      }
      if (testing::Test::HasFatalFailure()) return;
    }
    for (SeqId id : std::vector<SeqId>(running_)) finish(id);
    kv_.clear();
    KvStats st = kv_.stats();
    EXPECT_EQ(st.free_blocks, c_.n_blocks);
    EXPECT_EQ(st.prefix_query_tokens, queries_);
    EXPECT_EQ(st.prefix_hit_tokens, hits_);
    EXPECT_GT(hits_, 0);
    std::printf(
        "[ stress   ] admitted %d, failed %d, copy ops %d, mid-block hits %d, min free %d, "
        "max running %d\n",
        n_admitted_, n_failed_, n_copies_, n_mid_block_, min_free_, max_running_);
    // The test must have exercised what it claims: shared prefixes ending inside a block, and
    // for small pools allocation failures and eviction.
    if (c_.block_size > 1) {
      EXPECT_GT(n_copies_, 0);
      EXPECT_GT(n_mid_block_, 0);
    }
    if (!c_.expect_no_eviction) {
      EXPECT_GT(n_failed_, 0);
      EXPECT_EQ(min_free_, 0);
    }
  }

 private:
  int32_t pick(int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }
  V random_tokens(int32_t n) {
    V t(n);
    for (int32_t& x : t) x = pick(0, c_.vocab - 1);
    return t;
  }

  // Often a prefix of something computed before, then new tokens.
  V make_prompt() {
    V p;
    if (!history_.empty() && pick(0, 9) < 7) {
      const V& h = history_[pick(0, int32_t(history_.size()) - 1)];
      p.assign(h.begin(), h.begin() + pick(0, int32_t(h.size())));
    }
    return concat(p, random_tokens(pick(1, 3 * c_.block_size)));
  }

  int32_t reference_reuse(const V& p) const {
    int32_t best = 0;
    auto lcp = [&](const V& h) {
      size_t i = 0;
      while (i < h.size() && i < p.size() && h[i] == p[i]) ++i;
      return int32_t(i);
    };
    for (const V& h : history_) best = std::max(best, lcp(h));
    for (const auto& [id, computed] : live_) best = std::max(best, lcp(computed));
    return std::min(best, int32_t(p.size()) - 1);
  }

  void admit() {
    V p = make_prompt();
    SeqId id = next_id_++;
    auto before = kv_.stats();
    auto before_lru = kv_.eviction_order();
    auto a = kv_.match_and_allocate(id, p);
    if (!a) {
      ++n_failed_;
      auto after = kv_.stats();
      ASSERT_EQ(after.free_blocks, before.free_blocks);
      ASSERT_EQ(after.cached_blocks, before.cached_blocks);
      ASSERT_EQ(after.prefix_query_tokens, before.prefix_query_tokens);
      ASSERT_EQ(kv_.eviction_order(), before_lru);
      ASSERT_FALSE(kv_.contains(id));
      return;
    }
    int32_t want = reference_reuse(p);
    if (c_.expect_no_eviction) {
      ASSERT_EQ(a->n_cached, want);
    } else {
      ASSERT_LE(a->n_cached, want);
    }
    ASSERT_EQ(a->slots, kv_.slots(id));
    sh_.copy(a->copies);
    ASSERT_TRUE(sh_.holds(id, a->n_cached));
    queries_ += int64_t(p.size());
    hits_ += a->n_cached;
    running_.push_back(id);
    ++n_admitted_;
    n_copies_ += int32_t(a->copies.size());
    n_mid_block_ += a->n_cached % c_.block_size != 0;
    max_running_ = std::max(max_running_, int32_t(running_.size()));
    live_[id] = V(p.begin(), p.begin() + a->n_cached);
  }

  // Computes a chunk of pending tokens, or grows the sequence by a few decode tokens.
  void step(SeqId id) {
    int32_t done = kv_.n_computed(id), total = kv_.n_tokens(id);
    if (done < total) {
      int32_t to = pick(done + 1, total);
      sh_.write(id, done, to);
      kv_.commit(id, to);
      auto t = kv_.tokens(id);
      live_[id] = V(t.begin(), t.begin() + to);
      return;
    }
    if (!kv_.append_tokens(id, random_tokens(pick(1, 3)))) ++n_failed_;
  }

  // Finished sequences' content goes; running sequences keep all their computed tokens cached.
  // Like the engine, clear between steps: every admitted sequence has had its first step, so no
  // copy-on-write source (pinned until then, with tokens no running sequence has) survives.
  void clear() {
    for (SeqId id : running_) kv_.commit(id, kv_.n_computed(id));
    kv_.clear();
    history_.clear();
  }

  void finish(SeqId id) {
    history_.push_back(live_[id]);
    live_.erase(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
    kv_.release(id);
  }

  Config c_;
  std::mt19937_64 rng_;
  KvManager kv_;
  Shadow sh_;
  std::vector<SeqId> running_;
  std::map<SeqId, V> live_;  // computed tokens of running sequences
  std::vector<V> history_;   // computed tokens of finished sequences
  SeqId next_id_ = 1;
  int64_t queries_ = 0, hits_ = 0;
  int32_t n_failed_ = 0, n_admitted_ = 0, n_copies_ = 0, n_mid_block_ = 0, max_running_ = 0;
  int32_t min_free_ = 1 << 30;
};

}  // namespace

TEST(KvStress, LargePoolReusesExactlyTheLongestComputedPrefix) {
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) {
    SCOPED_TRACE(seed);
    Stress(
        {.n_blocks = 1500, .block_size = 4, .vocab = 3, .n_ops = 2500, .expect_no_eviction = true},
        seed)
        .run();
  }
}

TEST(KvStress, SmallPoolUnderEvictionPressureStaysConsistent) {
  for (uint64_t seed : {11, 12, 13, 14, 15, 16, 17, 18}) {
    SCOPED_TRACE(seed);
    Stress(
        {.n_blocks = 40, .block_size = 4, .vocab = 3, .n_ops = 4000, .expect_no_eviction = false},
        seed)
        .run();
  }
}

TEST(KvStress, BlockSizeOneAndSixteen) {
  Stress({.n_blocks = 50, .block_size = 1, .vocab = 2, .n_ops = 2000, .expect_no_eviction = false},
         21)
      .run();
  Stress({.n_blocks = 30, .block_size = 16, .vocab = 4, .n_ops = 2000, .expect_no_eviction = false},
         22)
      .run();
}
