// The editor workload of the EFIM paper (docs/efim-method.md sections 2 and 4) on the prefix
// cache: every round must reuse its whole cached token prefix, to the token.
#include <gtest/gtest.h>

#include <vector>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

using namespace efim;
using namespace efim::kvtest;
using V = std::vector<int32_t>;

namespace {

constexpr int32_t kPre = 1, kSuf = 2, kMid = 3;
constexpr int32_t kB = 16;

// A user's file, as token ids: distinct ranges so parts never match by accident.
struct File {
  V prefix0 = iota_tokens(37, 1000);  // typed before the first request
  V typed = iota_tokens(70, 2000);    // typed over the rounds, 11 tokens per round
  V suffix = iota_tokens(45, 3000);
  V inc(int32_t round) const { return V(typed.begin(), typed.begin() + 11 * (round + 1)); }
};

V efim_prompt(const File& f, int32_t round) {
  return concat(concat(concat(concat(V{kPre}, f.prefix0), V{kSuf}), f.suffix),
                concat(V{kMid}, f.inc(round)));
}

V psm_prompt(const File& f, int32_t round) {
  return concat(concat(concat(V{kPre}, f.prefix0), f.inc(round)),
                concat(concat(V{kSuf}, f.suffix), V{kMid}));
}

// Admits a request, checks the reused slots, prefills, decodes n_gen tokens (the last one is
// sampled but never fed, as in a real engine), releases. Returns n_cached.
int32_t serve(KvManager& kv, Shadow& sh, SeqId id, const V& prompt, int32_t n_gen) {
  auto a = kv.match_and_allocate(id, prompt);
  EXPECT_TRUE(a.has_value());
  if (!a) return -1;
  EXPECT_LE(a->copies.size(), size_t(kB - 1));
  sh.copy(a->copies);
  EXPECT_TRUE(sh.holds(id, a->n_cached));
  prefill(kv, sh, id);
  decode(kv, sh, id, iota_tokens(n_gen - 1, 50000 + 100 * int32_t(id)));
  EXPECT_TRUE(sh.holds(id, kv.n_computed(id)));
  kv.check_invariants();
  kv.release(id);
  return a->n_cached;
}

}  // namespace

TEST(KvWorkload, EfimTypingReusesThePreviousPromptToTheToken) {
  KvManager kv({.n_blocks = 256, .block_size = kB});
  Shadow sh(kv, 256);
  File f;
  int64_t queries = 0, hits = 0;
  for (int32_t r = 0; r < 5; ++r) {
    V p = efim_prompt(f, r);
    int32_t n_cached = serve(kv, sh, r + 1, p, 8);
    // Round r extends round r-1's prompt; round r-1's generated tokens diverge from it.
    EXPECT_EQ(n_cached, r == 0 ? 0 : int32_t(efim_prompt(f, r - 1).size())) << "round " << r;
    queries += int64_t(p.size());
    hits += n_cached;
  }
  EXPECT_EQ(kv.stats().prefix_query_tokens, queries);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, hits);
  EXPECT_GT(double(hits) / double(queries), 0.75);  // the paper's EFIM rate is about 75%
}

TEST(KvWorkload, AcceptedCompletionReusesTheWholeComputedSequence) {
  KvManager kv({.n_blocks = 256, .block_size = kB});
  Shadow sh(kv, 256);
  File f;
  V next = efim_prompt(f, 0);
  int32_t prev_computed = 0;
  for (int32_t r = 0; r < 5; ++r) {
    SeqId id = r + 1;
    auto a = kv.match_and_allocate(id, next);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->n_cached, prev_computed) << "round " << r;
    sh.copy(a->copies);
    ASSERT_TRUE(sh.holds(id, a->n_cached));
    prefill(kv, sh, id);
    decode(kv, sh, id, iota_tokens(9, 60000 + 100 * r));
    prev_computed = kv.n_computed(id);
    // The user accepts the completion and types 5 more tokens.
    next = concat(V(kv.tokens(id).begin(), kv.tokens(id).end()), iota_tokens(5, 70000 + 10 * r));
    kv.release(id);
    kv.check_invariants();
  }
}

TEST(KvWorkload, PsmDivergenceReusesExactlyTheCommonPrefix) {
  KvManager kv({.n_blocks = 256, .block_size = kB});
  Shadow sh(kv, 256);
  File f;
  for (int32_t r = 0; r < 5; ++r) {
    int32_t n_cached = serve(kv, sh, r + 1, psm_prompt(f, r), 8);
    // Common prefix with the previous round: <PRE> prefix0 inc(r-1); then <SUF> vs new text.
    int32_t common = r == 0 ? 0 : 1 + int32_t(f.prefix0.size()) + 11 * r;
    EXPECT_EQ(n_cached, common) << "round " << r;
  }
  // The EFIM form of the next request still finds its cached <PRE> prefix0 head.
  EXPECT_EQ(kv.peek(efim_prompt(f, 0)), 1 + int32_t(f.prefix0.size()));
}

TEST(KvWorkload, ConcurrentUsersShareNothingButKeepTheirOwnPrefixes) {
  KvManager kv({.n_blocks = 512, .block_size = kB});
  Shadow sh(kv, 512);
  std::vector<File> users(4);
  for (int32_t u = 0; u < 4; ++u) {
    users[u].prefix0 = iota_tokens(30 + 3 * u, 10000 * (u + 1));
    users[u].suffix = iota_tokens(40 + u, 10000 * (u + 1) + 5000);
  }
  for (int32_t r = 0; r < 5; ++r) {
    for (int32_t u = 0; u < 4; ++u) {
      SeqId id = 100 * r + u;
      int32_t n_cached = serve(kv, sh, id, efim_prompt(users[u], r), 6);
      // Round 0: only the <PRE> sentinel is shared, with the users served before.
      int32_t want = r > 0 ? int32_t(efim_prompt(users[u], r - 1).size()) : u == 0 ? 0 : 1;
      EXPECT_EQ(n_cached, want) << "user " << u << " round " << r;
    }
  }
}
