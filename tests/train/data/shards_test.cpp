// Token shards: round trip, malformed files, the packing sampler, and the corpus build.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data_test_util.h"
#include "train/data/build.h"
#include "train/data/shards.h"

namespace efim::train {
namespace {

using test::TempDir;

const ShardVocab kVocab{16384, 0, 1, 3, 2};

// Random samples shaped like the real ones: optional PSM frame, ends with <eos>.
std::vector<std::vector<int32_t>> random_samples(uint64_t seed, size_t n, int32_t vocab) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> s;
    const bool fim = rng.bernoulli(0.8);
    auto text = [&] {
      for (uint64_t k = rng.uniform(30); k > 0; --k)
        s.push_back(5 + static_cast<int32_t>(rng.uniform(static_cast<uint64_t>(vocab - 5))));
    };
    if (fim) s.push_back(1);
    text();
    if (fim) s.push_back(3);
    text();
    if (fim) s.push_back(2);
    text();
    s.push_back(0);
    out.push_back(std::move(s));
  }
  return out;
}

void write_samples(const std::string& dir, const std::vector<std::vector<int32_t>>& samples,
                   ShardVocab vocab = kVocab, uint64_t shard_tokens = 500) {
  ShardWriter w(dir, vocab, {shard_tokens, R"({"test": true})"});
  for (const auto& s : samples) w.add(s);
  w.finish();
}

TEST(Shards, RoundTripAcrossSeveralShards) {
  TempDir tmp("roundtrip");
  auto samples = random_samples(1, 300, 16384);
  write_samples(tmp.str(), samples);
  ShardReader r(tmp.str());
  ASSERT_EQ(r.num_samples(), samples.size());
  uint64_t tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(r.sample(i), samples[i]) << "sample " << i;
    EXPECT_EQ(r.sample_size(i), samples[i].size());
    tokens += samples[i].size();
  }
  EXPECT_EQ(r.num_tokens(), tokens);
  EXPECT_TRUE(std::filesystem::exists(tmp.path / "shard-00002.bin"));  // 500-token shards
  EXPECT_EQ(r.vocab().fim_middle, 2);
  EXPECT_EQ(nlohmann::json::parse(r.index_json())["build"]["test"], true);
  EXPECT_THROW(r.sample(samples.size()), Error);
}

TEST(Shards, WideVocabularyUsesUint32) {
  TempDir tmp("wide");
  ShardVocab v = kVocab;
  v.vocab_size = 100000;
  auto samples = random_samples(2, 50, v.vocab_size);
  samples[0][1] = 99999;
  write_samples(tmp.str(), samples, v, 1 << 20);
  ShardReader r(tmp.str());
  for (size_t i = 0; i < samples.size(); ++i) EXPECT_EQ(r.sample(i), samples[i]);
  std::ifstream f(tmp.path / "shard-00000.bin", std::ios::binary);
  char head[16];
  f.read(head, 16);
  uint32_t token_bytes;
  std::memcpy(&token_bytes, head + 12, 4);
  EXPECT_EQ(token_bytes, 4u);
}

TEST(Shards, WriterRejectsBadSamples) {
  TempDir tmp("writer");
  ShardWriter w(tmp.str(), kVocab);
  EXPECT_THROW(w.add(std::vector<int32_t>{}), Error);
  EXPECT_THROW(w.add(std::vector<int32_t>{5, 16384}), Error);
  EXPECT_THROW(w.add(std::vector<int32_t>{-1}), Error);
}

// ---- malformed files ------------------------------------------------------------------

std::string slurp(const std::filesystem::path& p) { return read_file(p.string()); }

// Writes one shard, lets `corrupt` edit its bytes, and returns the reader's error message.
template <typename F>
std::string open_corrupted(const std::string& name, F corrupt) {
  TempDir tmp(name);
  write_samples(tmp.str(), random_samples(3, 20, 16384), kVocab, 1 << 20);
  const auto shard = tmp.path / "shard-00000.bin";
  std::string bytes = slurp(shard);
  corrupt(bytes);
  write_file(shard.string(), bytes);
  try {
    ShardReader r(tmp.str());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void put_u64(std::string& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
void put_u32(std::string& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(Shards, MalformedFilesGiveCleanErrors) {
  EXPECT_CONTAINS(open_corrupted("trunc_head", [](std::string& b) { b.resize(40); }),
                  "shorter than the 64-byte header");
  EXPECT_CONTAINS(open_corrupted("trunc_body", [](std::string& b) { b.resize(b.size() - 9); }),
                  "truncated or corrupt");
  EXPECT_CONTAINS(open_corrupted("magic", [](std::string& b) { b[0] = 'X'; }), "bad magic");
  EXPECT_CONTAINS(open_corrupted("version", [](std::string& b) { put_u32(b, 8, 7); }),
                  "version 7");
  EXPECT_CONTAINS(open_corrupted("tokbytes", [](std::string& b) { put_u32(b, 12, 3); }),
                  "token_bytes 3");
  EXPECT_CONTAINS(open_corrupted("huge", [](std::string& b) { put_u64(b, 24, ~0ULL / 2); }),
                  "truncated or corrupt");
  // The last offset points past the tokens.
  EXPECT_CONTAINS(open_corrupted("offset_end",
                                 [](std::string& b) { put_u64(b, b.size() - 8, 1u << 30); }),
                  "must increase and stay <= n_tokens");
  // A middle offset goes backwards.
  EXPECT_CONTAINS(open_corrupted("offset_order",
                                 [](std::string& b) { put_u64(b, b.size() - 8 * 5, 0); }),
                  "must increase");
  // A token id outside the vocabulary.
  EXPECT_CONTAINS(open_corrupted("token", [](std::string& b) { b[64] = b[65] = '\xff'; }),
                  ">= vocab_size 16384");
}

TEST(Shards, MalformedIndexGivesCleanErrors) {
  TempDir tmp("index");
  write_samples(tmp.str(), random_samples(4, 20, 16384), kVocab, 1 << 20);
  const std::string index = (tmp.path / "index.json").string();
  const std::string good = read_file(index);
  auto error_with = [&](const std::string& text) -> std::string {
    write_file(index, text);
    try {
      ShardReader r(tmp.str());
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_CONTAINS(error_with("{not json"), "not valid JSON");
  nlohmann::json j = nlohmann::json::parse(good);
  j["shards"][0]["samples"] = 21;
  EXPECT_CONTAINS(error_with(j.dump()), "the index says 21");
  j = nlohmann::json::parse(good);
  j["shards"][0]["file"] = "../x.bin";
  EXPECT_CONTAINS(error_with(j.dump()), "plain name");
  j = nlohmann::json::parse(good);
  j["shards"][0]["file"] = "missing.bin";
  EXPECT_CONTAINS(error_with(j.dump()), "missing.bin");
  j = nlohmann::json::parse(good);
  j["tokens"] = 1;
  EXPECT_CONTAINS(error_with(j.dump()), "differ from the shards");
  std::filesystem::remove(index);
  EXPECT_THROW(ShardReader r(tmp.str()), Error);
}

// ---- packing sampler ------------------------------------------------------------------

TEST(Sampler, RowsPackAShuffledEpochOfSamples) {
  TempDir tmp("sampler");
  auto samples = random_samples(5, 200, 16384);
  write_samples(tmp.str(), samples);
  ShardReader r(tmp.str());
  SamplerOptions o{4, 63, 9, LossMask::all};
  SequenceSampler s(r, o);
  // The stream of the first epoch: rows laid end to end.
  std::vector<int32_t> stream;
  while (stream.size() < r.num_tokens()) {
    Batch b = s.next();
    ASSERT_EQ(b.tokens.size(), 4u * 64);
    ASSERT_EQ(b.mask.size(), 4u * 63);
    stream.insert(stream.end(), b.tokens.begin(), b.tokens.end());
  }
  // It must be a permutation of the samples (each ends with <eos> = 0 and nothing else does
  // in these samples, since text ids are >= 5).
  std::vector<std::vector<int32_t>> seen;
  size_t begin = 0;
  for (size_t i = 0; i < r.num_tokens(); ++i)
    if (stream[i] == 0) {
      seen.emplace_back(stream.begin() + begin, stream.begin() + i + 1);
      begin = i + 1;
    }
  ASSERT_EQ(seen.size(), samples.size());
  EXPECT_NE(seen, samples) << "the order should be shuffled";
  auto sorted_seen = seen, sorted_samples = samples;
  std::sort(sorted_seen.begin(), sorted_seen.end());
  std::sort(sorted_samples.begin(), sorted_samples.end());
  EXPECT_EQ(sorted_seen, sorted_samples);
  EXPECT_GE(s.epoch(), 1u);  // the last row ran into the next epoch
}

TEST(Sampler, DeterministicSkipAndSeeds) {
  TempDir tmp("sampler_det");
  write_samples(tmp.str(), random_samples(6, 100, 16384));
  ShardReader r(tmp.str());
  SamplerOptions o{3, 40, 1, LossMask::middle};
  SequenceSampler a(r, o), b(r, o), skipped(r, o);
  o.seed = 2;
  SequenceSampler c(r, o);
  std::vector<Batch> first;
  for (int i = 0; i < 30; ++i) {  // several epochs
    Batch x = a.next(), y = b.next();
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.mask, y.mask);
    first.push_back(x);
  }
  EXPECT_NE(first[0].tokens, c.next().tokens);
  skipped.skip(17);
  EXPECT_EQ(skipped.next().tokens, first[17].tokens);
}

TEST(Sampler, MiddleMaskCountsOnlyTheMiddleAndEos) {
  std::vector<int32_t> fim = {1, 10, 11, 3, 12, 2, 13, 14, 0};
  EXPECT_EQ(target_flags(fim, kVocab, LossMask::middle),
            (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(target_flags(fim, kVocab, LossMask::all), std::vector<uint8_t>(9, 1));
  std::vector<int32_t> plain = {10, 11, 0};
  EXPECT_EQ(target_flags(plain, kVocab, LossMask::middle), (std::vector<uint8_t>{0, 1, 1}));
  // In a batch, mask[t] is the flag of tokens[t + 1].
  TempDir tmp("mask");
  write_samples(tmp.str(), {fim});
  ShardReader r(tmp.str());
  SequenceSampler s(r, {1, 8, 0, LossMask::middle});
  Batch b = s.next();
  EXPECT_EQ(b.tokens, fim);
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1, 1}));
}

// ---- corpus build ---------------------------------------------------------------------

// A corpus folder as scripts/build_corpus.sh writes it.
void write_corpus(const std::string& dir, const std::vector<std::string>& docs) {
  std::string manifest = "path\tpackage\tbytes\tsha256\tsplit\n";
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string path = "pkg/mod" + std::to_string(i) + ".py";
    std::filesystem::create_directories(std::filesystem::path(dir) / "files" / "pkg");
    write_file((std::filesystem::path(dir) / "files" / path).string(), docs[i]);
    manifest += path + "\tpython3-x\t" + std::to_string(docs[i].size()) + "\t" +
                std::string(64, 'a') + "\t" + (i % 5 == 4 ? "valid" : "train") + "\n";
  }
  write_file((std::filesystem::path(dir) / "manifest.tsv").string(), manifest);
}

TEST(Build, CorpusToShardsWithJsonlIsThreadIndependent) {
  TempDir tmp("build");
  auto docs = test::random_documents(8, 30, 5000);
  write_corpus((tmp.path / "corpus").string(), docs);
  BuildOptions o;
  o.corpus_dir = (tmp.path / "corpus").string();
  o.out_dir = (tmp.path / "a").string();
  o.fim.chunk_chars = 500;
  o.fim.fragment_rate = 0.01;
  o.jsonl = true;
  o.progress = false;
  o.threads = 1;
  BuildStats st = build_shards(test::efim_tokenizer(), o);
  EXPECT_EQ(st.docs, 24u);  // 6 of 30 are in the valid split
  o.out_dir = (tmp.path / "b").string();
  o.threads = 2;
  build_shards(test::efim_tokenizer(), o);
  EXPECT_EQ(slurp(tmp.path / "a" / "shard-00000.bin"), slurp(tmp.path / "b" / "shard-00000.bin"));

  ShardReader r(o.out_dir);
  EXPECT_EQ(r.num_samples(), st.samples);
  EXPECT_EQ(r.num_tokens(), st.tokens);
  // Every JSONL line parses and matches its shard sample; decoding the samples of each
  // document (prefix + middle + suffix of each chunk) gives its text back.
  const Tokenizer& tok = test::efim_tokenizer();
  std::istringstream jsonl(slurp(tmp.path / "b" / "samples.jsonl"));
  std::map<std::string, std::string> texts;
  std::string line;
  uint64_t i = 0;
  while (std::getline(jsonl, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_LT(i, r.num_samples());
    std::vector<int32_t> ids = r.sample(i++);
    EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), ids);
    ASSERT_EQ(ids.back(), tok.eos());
    ids.pop_back();
    std::string& text = texts[j["doc"].get<std::string>()];
    if (ids[0] != tok.fim().prefix) {
      text += tok.decode(ids);
      continue;
    }
    auto at = [&](int32_t id) { return std::find(ids.begin(), ids.end(), id) - ids.begin(); };
    const size_t si = at(tok.fim().suffix), mi = at(tok.fim().middle);
    ASSERT_LT(si, mi);
    std::span<const int32_t> all(ids);
    text += tok.decode(all.subspan(1, si - 1)) + tok.decode(all.subspan(mi + 1)) +
            tok.decode(all.subspan(si + 1, mi - si - 1));
  }
  EXPECT_EQ(i, r.num_samples());
  ASSERT_EQ(texts.size(), 24u);
  for (size_t d = 0; d < docs.size(); ++d)
    if (d % 5 != 4) {
      EXPECT_EQ(texts["pkg/mod" + std::to_string(d) + ".py"], docs[d]) << d;
    }
  o.split = "valid";
  o.out_dir = (tmp.path / "v").string();
  EXPECT_EQ(build_shards(test::efim_tokenizer(), o).docs, 6u);
}

TEST(Build, BadManifestsGiveErrors) {
  TempDir tmp("manifest");
  write_file((tmp.path / "manifest.tsv").string(), "path\tpackage\tbytes\tsha256\tsplit\na.py\tp\tx\th\ttrain\n");
  EXPECT_THROW(read_manifest(tmp.str(), "train"), Error);
  write_file((tmp.path / "manifest.tsv").string(), "wrong header\n");
  EXPECT_THROW(read_manifest(tmp.str(), "train"), Error);
  write_file((tmp.path / "manifest.tsv").string(), "path\tpackage\tbytes\tsha256\tsplit\n../a.py\tp\t3\th\ttrain\n");
  EXPECT_THROW(read_manifest(tmp.str(), "train"), Error);
  // The manifest's size disagrees with the file.
  write_corpus(tmp.str(), {"print('hi')\n"});
  write_file((tmp.path / "files" / "pkg" / "mod0.py").string(), "x");
  BuildOptions o;
  o.corpus_dir = tmp.str();
  o.out_dir = (tmp.path / "out").string();
  o.progress = false;
  EXPECT_THROW(build_shards(test::efim_tokenizer(), o), Error);
}

}  // namespace
}  // namespace efim::train
