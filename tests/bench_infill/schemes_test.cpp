// The prompts the client builds, on the real efim-base-py tokenizer: exact sentinel positions
// (<fim_prefix>=1, <fim_middle>=2, <fim_suffix>=3, no bos) in PSM, SPM and EFIM, and the
// request bodies of every scheme.
#include "bench/infill/schemes.h"

#include <algorithm>
#include <gtest/gtest.h>

#include "base/error.h"
#include "bench/infill/server_process.h"

namespace efim::bench {
namespace {

constexpr int32_t kPre = 1, kMid = 2, kSuf = 3;

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class BenchSchemesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new Tokenizer(Tokenizer::from_json_file(
        std::string(EFIM_SOURCE_DIR) + "/tests/tokenizer/data/efim-base-py/tokenizer.json"));
    layout_ = new FimLayout(*tok_, make_format(*tok_));
  }
  static void TearDownTestSuite() {
    delete layout_;
    delete tok_;
  }
  std::vector<int32_t> enc(const std::string& s) const { return tok_->encode(s); }
  // A Python file cut like the workload does; the cut points fall inside identifiers.
  UserDoc doc() const {
    std::string text;
    for (int i = 0; i < 12; ++i)
      text += "def completion_" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) +
              "  # é\n";
    return split_document("doc.py", text, 3);
  }
  static Tokenizer* tok_;
  static FimLayout* layout_;
};
Tokenizer* BenchSchemesTest::tok_ = nullptr;
FimLayout* BenchSchemesTest::layout_ = nullptr;

TEST_F(BenchSchemesTest, SentinelsOfTheBundledTokenizer) {
  EXPECT_EQ(tok_->fim().prefix, kPre);
  EXPECT_EQ(tok_->fim().middle, kMid);
  EXPECT_EQ(tok_->fim().suffix, kSuf);
  EXPECT_FALSE(tok_->add_bos_default());
}

TEST_F(BenchSchemesTest, PsmLayout) {
  UserDoc u = doc();
  for (int r = 0; r < 3; ++r) {
    const auto p = enc(u.prefix + u.typed[size_t(r)]), s = enc(u.suffix);
    auto t = scheme_tokens(*layout_, Scheme::cache_psm, u, r);
    EXPECT_EQ(t, cat({{kPre}, p, {kSuf}, s, {kMid}}));
    EXPECT_EQ(t[0], kPre);
    EXPECT_EQ(t[1 + p.size()], kSuf);
    EXPECT_EQ(t.back(), kMid);
    EXPECT_EQ(scheme_tokens(*layout_, Scheme::nocache_psm, u, r), t);
  }
}

// efim-base-py is a starcoder-family model: SPM is the "joint" variant P S s M p (layout.h).
TEST_F(BenchSchemesTest, SpmLayout) {
  UserDoc u = doc();
  const auto p = enc(u.prefix + u.typed[1]), s = enc(u.suffix);
  auto t = scheme_tokens(*layout_, Scheme::cache_spm, u, 1);
  EXPECT_EQ(t, cat({{kPre, kSuf}, s, {kMid}, p}));
  EXPECT_EQ(t[2 + s.size()], kMid);
}

TEST_F(BenchSchemesTest, EfimLayoutKeepsTheRoundsSharedPrefix) {
  UserDoc u = doc();
  const auto p = enc(u.prefix), s = enc(u.suffix);
  const std::vector<int32_t> head = cat({{kPre}, p, {kSuf}, s, {kMid}});
  for (int r = 0; r < 3; ++r) {
    auto t = scheme_tokens(*layout_, Scheme::cache_efim, u, r);
    EXPECT_EQ(t, cat({head, enc(u.typed[size_t(r)])}));
    EXPECT_EQ(t[1 + p.size()], kSuf);
    EXPECT_EQ(t[2 + p.size() + s.size()], kMid);
    // Every round starts with the same P p S s M: what the prefix cache keeps.
    EXPECT_TRUE(std::equal(head.begin(), head.end(), t.begin()));
  }
  // Typed text with sentinel spellings stays text (rule 7).
  UserDoc evil = u;
  evil.typed[0] = "<fim_middle>";
  auto t = scheme_tokens(*layout_, Scheme::cache_efim, evil, 0);
  EXPECT_EQ(std::count(t.begin(), t.end(), kMid), 1);
}

TEST_F(BenchSchemesTest, RequestBodies) {
  UserDoc u = doc();
  SamplingSpec sp;
  sp.output_tokens = 7;
  sp.seed = 100;
  for (Scheme s : all_schemes()) {
    auto b = request_body(*layout_, s, u, 2, sp, 5);
    EXPECT_EQ(b["max_tokens"], 7);
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["seed"], 105);
    EXPECT_DOUBLE_EQ(b["temperature"].get<double>(), 0.2);
    EXPECT_DOUBLE_EQ(b["top_p"].get<double>(), 0.95);
    EXPECT_EQ(b["top_k"], 20);
    if (s == Scheme::cache_auto) {
      EXPECT_EQ(b["prompt"], u.prefix + u.typed[2]);
      EXPECT_EQ(b["suffix"], u.suffix);
    } else {
      EXPECT_FALSE(b.contains("suffix"));
      EXPECT_EQ(b["prompt"].get<std::vector<int32_t>>(), scheme_tokens(*layout_, s, u, 2));
    }
  }
  EXPECT_THROW(scheme_tokens(*layout_, Scheme::cache_psm, u, 3), Error);
  EXPECT_THROW(scheme_tokens(*layout_, Scheme::cache_auto, u, 0), Error);
}

TEST_F(BenchSchemesTest, MaxPromptTokensIsTheLongestClientPrompt) {
  UserDoc u = doc();
  size_t most = 0;
  for (Scheme s : {Scheme::cache_psm, Scheme::cache_spm, Scheme::cache_efim})
    for (int r = 0; r < 3; ++r) most = std::max(most, scheme_tokens(*layout_, s, u, r).size());
  EXPECT_EQ(max_prompt_tokens(*layout_, {u}), most);
}

TEST(BenchSchemes, NamesAndServers) {
  EXPECT_EQ(parse_schemes("all").size(), 5u);
  EXPECT_EQ(parse_schemes("cache-efim,nocache-psm"),
            (std::vector<Scheme>{Scheme::cache_efim, Scheme::nocache_psm}));
  for (Scheme s : all_schemes()) EXPECT_EQ(parse_scheme(scheme_name(s)), s);
  EXPECT_THROW(parse_schemes("cache-psm,bogus"), Error);
  EXPECT_THROW(parse_schemes("cache-psm,cache-psm"), Error);
  EXPECT_THROW(parse_schemes(""), Error);
  EXPECT_FALSE(scheme_server(Scheme::nocache_psm).prefix_cache);
  EXPECT_TRUE(scheme_server(Scheme::cache_psm).prefix_cache);
  EXPECT_EQ(scheme_server(Scheme::cache_auto).infill_mode, "auto");
  EXPECT_EQ(scheme_server(Scheme::cache_efim).infill_mode, "psm");
  // cache-auto-noheal: cache-auto without token healing; not part of "all".
  EXPECT_EQ(parse_scheme("cache-auto-noheal"), Scheme::cache_auto_noheal);
  EXPECT_EQ(scheme_server(Scheme::cache_auto_noheal).infill_mode, "auto");
  EXPECT_EQ(scheme_server(Scheme::cache_auto_noheal).token_healing, "off");
  EXPECT_EQ(scheme_server(Scheme::cache_auto).token_healing, "auto");
  EXPECT_EQ(std::count(all_schemes().begin(), all_schemes().end(), Scheme::cache_auto_noheal), 0);
  // cache-auto-exact: cache-auto with the exact healing variant; not part of "all" either.
  EXPECT_EQ(parse_scheme("cache-auto-exact"), Scheme::cache_auto_exact);
  EXPECT_EQ(scheme_server(Scheme::cache_auto_exact).token_healing, "auto");
  EXPECT_EQ(scheme_server(Scheme::cache_auto_exact).token_healing_variant, "exact");
  EXPECT_EQ(scheme_server(Scheme::cache_auto).token_healing_variant, "");
  EXPECT_EQ(std::count(all_schemes().begin(), all_schemes().end(), Scheme::cache_auto_exact), 0);
}

TEST(BenchSchemes, ServeCommand) {
  ServeSpec s;
  s.exe = "/bin/efim";
  s.model = "m.gguf";
  s.prefix_cache = false;
  s.threads = 2;
  s.kv_cache_mb = 64;
  s.max_requests = 4;
  EXPECT_EQ(serve_argv(s),
            (std::vector<std::string>{"/bin/efim", "serve", "m.gguf", "--host", "127.0.0.1",
                                      "--port", "0", "--infill-mode", "psm", "--token-healing",
                                      "auto", "--kv-cache-mb", "64", "-t", "2",
                                      "--no-prefix-cache", "--max-requests", "4"}));
  s.prefix_cache = true;
  s.max_requests = 0;
  EXPECT_EQ(serve_argv(s).size(), 15u);
  s.token_healing_variant = "exact";
  const auto argv = serve_argv(s);
  ASSERT_EQ(argv.size(), 17u);
  EXPECT_EQ(argv[15], "--token-healing-variant");
  EXPECT_EQ(argv[16], "exact");
}

// The peer: llama.cpp's llama-server on the same file, one slot per user of the given context,
// the same threads; other peers are refused.
TEST(BenchSchemes, PeerLlamaServerCommand) {
  ServeSpec s;
  s.exe = "/deps/llama-server";
  s.model = "m.gguf";
  s.peer = "llama-server";
  s.peer_slots = 4;
  s.peer_slot_ctx = 1280;
  s.port = 8099;
  s.threads = 2;
  EXPECT_EQ(serve_argv(s),
            (std::vector<std::string>{"/deps/llama-server", "-m", "m.gguf", "--host",
                                      "127.0.0.1", "--port", "8099", "-np", "4", "-c", "5120",
                                      "-t", "2", "-tb", "2"}));
  s.threads = 0;  // its default
  EXPECT_EQ(serve_argv(s).size(), 11u);
  s.peer = "vllm";
  EXPECT_THROW(serve_argv(s), Error);
}

}  // namespace
}  // namespace efim::bench
