// Id-for-id parity with Hugging Face `tokenizers` (npm 0.23.2) on the whole Python standard
// library, a Unicode stress file and invalid UTF-8, for every vocabulary efim supports:
//   llama3, qwen3, efim-base-py: their tokenizer.json, loaded by us and by the oracle;
//   deepseek-coder, starcoder:   we load llama.cpp's GGUF vocabulary; the oracle runs on a
//                                tokenizer.json built from that GGUF with gguf-py
//                                (scripts/tokenizer_gguf_to_hf.py), whose fidelity is checked
//                                against llama.cpp's expected ids in OracleJsonMatchesLlamaCpp.
// SentencePiece-style:
//   llama2, gemma, gemma3:       their tokenizer.json (merges by rank, byte fallback);
//   llama2-metaspace(-split):    llama2's file rewritten to the newer Metaspace spelling
//                                (prepend_scheme "first" / "always" with split), the oracle
//                                running on the same rewritten file;
// (lenml's "llama2" package holds Mistral 7B's 32000-token vocabulary: "▁" is 28705, not 29871.)
#include <chrono>
#include <map>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace efim::test {
namespace {

struct Vocab {
  std::string name;
  std::string oracle_json;  // what npm tokenizers loads
  std::unique_ptr<Tokenizer> tok;
};

// llama2's tokenizer.json with the normalizer's space handling moved to a Metaspace
// pre-tokenizer, as newer Llama and Mistral files spell it.
std::string metaspace_json(const std::string& scheme, bool split) {
  require_file(lenml_json("llama2"));
  const std::string path = cache_dir() + "/llama2-metaspace-" + scheme + (split ? "-split" : "") + ".json";
  if (fs::exists(path)) return path;
  nlohmann::json j = nlohmann::json::parse(read_file(lenml_json("llama2")));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                        {"prepend_scheme", scheme}, {"split", split}};
  write_file(path + ".tmp", j.dump());
  fs::rename(path + ".tmp", path);
  return path;
}

Vocab load_vocab(const std::string& name) {
  Vocab v{name, "", nullptr};
  if (name == "llama3") v.oracle_json = llama3_json();
  if (name == "qwen3") v.oracle_json = qwen3_json();
  if (name == "efim-base-py") v.oracle_json = efim_json();
  if (name == "llama2" || name == "gemma" || name == "gemma3") v.oracle_json = lenml_json(name);
  if (name == "llama2-metaspace") v.oracle_json = metaspace_json("first", false);
  if (name == "llama2-metaspace-split") v.oracle_json = metaspace_json("always", true);
  if (!v.oracle_json.empty()) {
    require_file(v.oracle_json);
    v.tok = std::make_unique<Tokenizer>(Tokenizer::from_json_file(v.oracle_json));
  } else {
    v.oracle_json = hf_json_for_gguf(name);
    v.tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(vocab_gguf(name))));
  }
  return v;
}

std::vector<std::string> corpus_files() {
  std::vector<std::string> files = stdlib_files();
  files.push_back(src("tests/tokenizer/data/unicode_stress.txt"));
  files.push_back(src("tests/tokenizer/data/invalid_utf8.bin"));
  return files;
}

// Compares our ids with the oracle's for every file; reports the first mismatches.
void expect_parity(const Vocab& v, const std::vector<std::string>& files, bool parse_special) {
  const auto expected = oracle_encode(v.oracle_json, parse_special ? "special" : "plain", files);
  size_t bad = 0, tokens = 0, bytes = 0;
  double seconds = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string text = read_file(files[i]);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = v.tok->encode(text, {.parse_special = parse_special});
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokens += ids.size();
    bytes += text.size();
    const std::string diff = first_mismatch(*v.tok, files[i], text, expected[i], ids);
    if (!diff.empty() && ++bad <= 3) ADD_FAILURE() << v.name << ": " << diff;
  }
  EXPECT_EQ(bad, 0u) << v.name << ": " << bad << " of " << files.size() << " files differ";
  std::printf("[speed] %s: %zu files, %.2f MB, %zu tokens in %.2f s: %.0f tokens/s, %.2f MB/s "
              "(first pass, cold cache)\n",
              v.name.c_str(), files.size(), bytes / 1e6, tokens, seconds, tokens / seconds,
              bytes / 1e6 / seconds);
}

class OracleParity : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleParity, CorpusPlainText) {
  const Vocab v = load_vocab(GetParam());
  expect_parity(v, corpus_files(), false);
}

TEST_P(OracleParity, SpecialTokensParsedWhenAsked) {
  const Vocab v = load_vocab(GetParam());
  expect_parity(v,
                {src("tests/tokenizer/data/unicode_stress.txt"),
                 src("tests/tokenizer/data/invalid_utf8.bin"),
                 "/usr/lib/python3.11/textwrap.py"},
                true);
}

// What Hugging Face's SentencePiece-style decoder chain makes of our token bytes: a run of
// <0xXX> byte tokens that is not valid UTF-8 as a whole becomes one U+FFFD per token
// (ByteFallback), and Strip removes one leading space of the whole text. decode() itself keeps
// both the bytes and the space: a generated continuation needs its leading space.
std::string hf_spm_rendering(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                             bool strip_space) {
  std::string out, run;
  size_t run_tokens = 0;
  auto flush = [&] {
    out += unicode::is_valid_utf8(run) ? run : [&] {
      std::string r;
      for (size_t k = 0; k < run_tokens; ++k) r += "\xEF\xBF\xBD";
      return r;
    }();
    run.clear();
    run_tokens = 0;
  };
  for (int32_t id : ids) {
    if (skip && tok.is_special(id)) continue;
    const std::string_view sp = tok.token_text(id);
    if (sp.size() == 6 && sp.substr(0, 3) == "<0x" && tok.token_bytes(id).size() == 1) {
      run += tok.token_bytes(id);
      ++run_tokens;
      continue;
    }
    flush();
    out += tok.token_bytes(id);
  }
  flush();
  if (strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return unicode::to_valid_utf8(out);
}

// decode() of random ids, made valid UTF-8, equals HF's decode (which applies
// String::from_utf8_lossy), with and without skip_special_tokens.
TEST_P(OracleParity, DecodeRandomIds) {
  const Vocab v = load_vocab(GetParam());
  const Tokenizer& tok = *v.tok;
  const FimTokens& f = tok.fim();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(0, tok.vocab_size() - 1);
  std::vector<int32_t> specials;
  for (const auto& a : tok.added_tokens()) specials.push_back(a.id);
  nlohmann::json lists = nlohmann::json::array();
  std::vector<std::vector<int32_t>> ours;
  for (int k = 0; k < 300; ++k) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 12);
    while (static_cast<int>(ids.size()) < n) {
      int32_t id = (rng() % 5 == 0 && !specials.empty()) ? specials[rng() % specials.size()] : any(rng);
      // FIM sentinels are special for us even where tokenizer.json says special=false.
      if (id == f.prefix || id == f.suffix || id == f.middle || id == f.pad || id == f.repo_name ||
          id == f.file_sep) {
        continue;
      }
      ids.push_back(id);
    }
    lists.push_back(ids);
    ours.push_back(ids);
  }
  const std::string oracle_text = read_file(v.oracle_json);
  const uint64_t key = fnv1a(lists.dump(), fnv1a(oracle_text,
                                                  fnv1a(read_file(src("scripts/tokenizer_oracle.js")))));
  const std::string in = cache_dir() + "/decode-" + v.name + "-" + hex(key) + ".json";
  const std::string out = in + ".out";
  if (!fs::exists(out)) {
    write_file(in, lists.dump());
    run_command("node '" + src("scripts/tokenizer_oracle.js") + "' --tokenizer '" + v.oracle_json +
                "' --decode '" + in + "' --out '" + out + "'");
  }
  const auto expected = nlohmann::json::parse(read_file(out));
  ASSERT_EQ(expected.size(), ours.size());
  // llama2's decoder ends with a Strip of one leading space.
  const bool strip = oracle_text.find("\"type\":\"Strip\"") != std::string::npos ||
                     oracle_text.find("\"type\": \"Strip\"") != std::string::npos;
  for (size_t k = 0; k < ours.size(); ++k) {
    std::string plain = unicode::to_valid_utf8(tok.decode(ours[k]));
    std::string skip = unicode::to_valid_utf8(tok.decode(ours[k], {.skip_special = true}));
    if (tok.sentencepiece()) {
      plain = hf_spm_rendering(tok, ours[k], false, strip);
      skip = hf_spm_rendering(tok, ours[k], true, strip);
      // The rendering is built from token_bytes: decode() must be their concatenation.
      std::string joined;
      for (int32_t id : ours[k]) joined += tok.token_bytes(id);
      EXPECT_EQ(tok.decode(ours[k]), joined);
    }
    EXPECT_EQ(plain, expected[k][0].get<std::string>()) << v.name << " ids " << lists[k].dump();
    EXPECT_EQ(skip, expected[k][1].get<std::string>()) << v.name << " ids " << lists[k].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, OracleParity,
                         ::testing::Values("llama3", "qwen3", "efim-base-py", "deepseek-coder",
                                           "starcoder", "llama2", "gemma", "gemma3",
                                           "llama2-metaspace", "llama2-metaspace-split"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// The tokenizer.json files built from GGUF reproduce llama.cpp's expected ids under the
// oracle: evidence that they are faithful stand-ins for the original Hugging Face files.
TEST(OracleJson, OracleJsonMatchesLlamaCpp) {
  for (const std::string name : {"deepseek-coder", "starcoder"}) {
    const auto cases = read_vocab_cases(vocab_gguf(name));
    std::vector<std::string> files;
    for (size_t i = 0; i < cases.size(); ++i) {
      files.push_back(cache_dir() + "/case-" + name + "-" + std::to_string(i) + ".txt");
      write_file(files.back(), cases[i].text);
    }
    const auto ids = oracle_encode(hf_json_for_gguf(name), "special", files);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(ids[i], cases[i].ids) << name << " case " << i << ": \"" << escaped(cases[i].text) << "\"";
    }
  }
}

}  // namespace
}  // namespace efim::test

// The regex-engine decision (see src/tokenizer/pretokenize.cpp): the hand-written Llama-3
// matcher against ICU's regex engine running the same pattern, on the standard library. The
// pieces must be identical; both speeds are printed.
#include <unicode/regex.h>
#include <unicode/unistr.h>

namespace efim::test {
namespace {

TEST(PreTokenizerEngine, HandWrittenEqualsIcuRegex) {
  // ICU's \s lacks U+000B and U+0085, so White_Space is spelled out; (?i) folds are explicit.
  const char* pattern =
      "(?:'[sS\\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
      "|\\p{N}{1,3}| ?[^\\p{White_Space}\\p{L}\\p{N}]+[\\r\\n]*|\\p{White_Space}*[\\r\\n]+"
      "|\\p{White_Space}+(?![^\\p{White_Space}])|\\p{White_Space}+";
  UErrorCode err = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexPattern> re(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(pattern), 0, err));
  ASSERT_TRUE(U_SUCCESS(err)) << u_errorName(err);
  const PreTokenizer pre({PreStep::kLlama3});
  double t_hand = 0, t_icu = 0;
  size_t bytes = 0, pieces_total = 0, bad = 0;
  for (const auto& f : stdlib_files()) {
    const std::string text = unicode::to_valid_utf8(read_file(f));
    bytes += text.size();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Piece> ours;
    pre.split(text, ours);
    auto t1 = std::chrono::steady_clock::now();
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
    std::unique_ptr<icu::RegexMatcher> m(re->matcher(u, err));
    std::vector<std::pair<int32_t, int32_t>> theirs;  // UTF-16 ranges
    while (m->find(err)) theirs.emplace_back(m->start(err), m->end(err));
    auto t2 = std::chrono::steady_clock::now();
    t_hand += std::chrono::duration<double>(t1 - t0).count();
    t_icu += std::chrono::duration<double>(t2 - t1).count();
    pieces_total += ours.size();
    bool same = ours.size() == theirs.size();
    for (size_t i = 0; same && i < ours.size(); ++i) {
      std::string s;
      u.tempSubStringBetween(theirs[i].first, theirs[i].second).toUTF8String(s);
      same = s == text.substr(ours[i].first, ours[i].second - ours[i].first);
    }
    if (!same && ++bad <= 3) ADD_FAILURE() << f << ": pieces differ from ICU regex";
  }
  EXPECT_EQ(bad, 0u);
  std::printf("[speed] pre-tokenizer llama3 on stdlib (%.2f MB, %zu pieces): hand-written %.3f s "
              "(%.1f MB/s), ICU regex %.3f s (%.1f MB/s)\n",
              bytes / 1e6, pieces_total, t_hand, bytes / 1e6 / t_hand, t_icu, bytes / 1e6 / t_icu);
}

}  // namespace
}  // namespace efim::test

// llama.cpp (the prebuilt library, through .deps/bin/llama_ref) loads the GGUF metadata we
// write and tokenizes the standard library to the same ids as we do.
namespace efim::test {
namespace {

// llama.cpp (llama_ref tokenize, no bos, special tokens not parsed) and `tok` give the same ids
// for every file of the standard library.
void expect_llama_cpp_ids(const Tokenizer& tok, const std::string& gguf, const std::string& name) {
  const std::string llama_ref = deps("bin/llama_ref");
  std::vector<std::string> files = stdlib_files();
  std::string list;
  for (const auto& f : files) list += f + "\n";
  const std::string list_path = cache_dir() + "/" + name + ".stdlib.list";
  write_file(list_path, list);
  const std::string out = cache_dir() + "/" + name + ".stdlib.ids";
  run_command("'" + llama_ref + "' tokenize '" + gguf + "' '" + list_path + "' --list", out);
  std::istringstream lines(read_file(out));
  size_t bad = 0, skipped_non_nfc = 0;
  std::string line;
  for (const auto& f : files) {
    ASSERT_TRUE(std::getline(lines, line)) << "llama_ref gave fewer lines than files";
    std::vector<int32_t> expected;
    std::istringstream is(line);
    for (int32_t id; is >> id;) expected.push_back(id);
    const std::string text = read_file(f);
    // llama.cpp does not NFC-normalize for Qwen2 (Hugging Face does, and so do we).
    if (tok.nfc() && unicode::nfc(unicode::to_valid_utf8(text)) != text) {
      ++skipped_non_nfc;
      continue;
    }
    const std::string diff = first_mismatch(tok, f, text, expected, tok.encode(text));
    if (!diff.empty() && ++bad <= 3) ADD_FAILURE() << name << " (llama.cpp): " << diff;
  }
  std::printf("%s: %zu files compared with llama.cpp, %zu not in NFC left out\n", name.c_str(),
              files.size() - skipped_non_nfc, skipped_non_nfc);
  EXPECT_LT(skipped_non_nfc, 10u);
  EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << files.size() << " files differ from llama.cpp";
}

class LlamaCppLoadsOurGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppLoadsOurGguf, SameIdsOnTheStdlib) {
  const std::string llama_ref = deps("bin/llama_ref");
  require_file(llama_ref);
  const std::string name = GetParam();
  const std::string json = name == "llama3"         ? llama3_json()
                           : name == "qwen3"        ? qwen3_json()
                           : name == "efim-base-py" ? efim_json()
                                                    : lenml_json(name);
  require_file(json);
  const Tokenizer tok = Tokenizer::from_json_file(json);
  GgufWriter w;
  // A vocab-only GGUF still needs the architecture's hyper-parameters (efim-base-py's).
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "efim-tokenizer-" + name);
  for (auto [key, v] : std::vector<std::pair<std::string, uint32_t>>{
           {"llama.block_count", 10}, {"llama.context_length", 2048},
           {"llama.embedding_length", 384}, {"llama.feed_forward_length", 1024},
           {"llama.attention.head_count", 6}, {"llama.attention.head_count_kv", 2},
           {"llama.rope.dimension_count", 64}}) {
    w.set_u32(key, v);
  }
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(tok.vocab_size()));
  tok.write_gguf_metadata(w);
  const std::string gguf = cache_dir() + "/ours-" + name + ".gguf";
  w.write(gguf);
  expect_llama_cpp_ids(tok, gguf, name);
}

// SentencePiece by piece score: llama.cpp's own GGUF of Llama 2's vocabulary, tokenized by
// llama.cpp and by us on the whole standard library.
TEST(LlamaCppSpm, LlamaSpmGgufSameIdsOnTheStdlib) {
  require_file(deps("bin/llama_ref"));
  const std::string gguf = vocab_gguf("llama-spm");
  require_file(gguf);
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(gguf));
  ASSERT_TRUE(tok.merges_by_score());
  expect_llama_cpp_ids(tok, gguf, "llama-spm");
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppLoadsOurGguf,
                         ::testing::Values("efim-base-py", "llama3", "qwen3", "llama2", "gemma"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace efim::test
