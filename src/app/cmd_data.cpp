// `efim data build|inspect`: fragment-tokenized FIM training shards (src/train/data).
#include <unistd.h>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "train/data/build.h"
#include "train/data/shards.h"

namespace efim::app {
namespace {

struct InspectArgs {
  std::string dir, tokenizer;
  uint64_t sample = 0;
};

void run_build(train::BuildOptions o) {
  Tokenizer tok = load_tokenizer(o.tokenizer_label);
  train::BuildStats st = train::build_shards(tok, o);
  std::printf("split %s: %llu documents (%s) -> %llu samples (plain %llu, fim-short %llu, "
              "fim-span %llu), %llu tokens, %llu fragments\n",
              o.split.c_str(), (unsigned long long)st.docs, human_bytes(double(st.bytes)).c_str(),
              (unsigned long long)st.samples, (unsigned long long)st.kind_count[0],
              (unsigned long long)st.kind_count[1], (unsigned long long)st.kind_count[2],
              (unsigned long long)st.tokens, (unsigned long long)st.fragments);
  std::printf("%.1f s, %.0f tokens/s, %s/s of text, %d threads -> %s\n", st.seconds,
              double(st.tokens) / st.seconds, human_bytes(double(st.bytes) / st.seconds).c_str(),
              o.threads, o.out_dir.c_str());
}

// Prints the parts of one sample, decoded, with the sentinels written out.
void print_sample(const train::ShardReader& r, const Tokenizer& tok, uint64_t i) {
  std::vector<int32_t> ids = r.sample(i);
  std::printf("\nsample %llu: %zu tokens\n", (unsigned long long)i, ids.size());
  const train::ShardVocab& v = r.vocab();
  size_t begin = 0;
  auto part = [&](size_t end) {
    std::string text = tok.decode(std::span<const int32_t>(ids.data() + begin, end - begin));
    std::printf("%s", text.c_str());
  };
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    if (id == v.eos || id == v.fim_prefix || id == v.fim_suffix || id == v.fim_middle) {
      part(k);
      // Sentinels in reverse video on a terminal, plain text in a pipe.
      const char* fmt = ::isatty(STDOUT_FILENO) ? "\x1b[7m%s\x1b[0m" : "%s";
      std::printf(fmt, std::string(tok.token_text(id)).c_str());
      begin = k + 1;
    }
  }
  part(ids.size());
  std::printf("\n");
}

void run_inspect(const InspectArgs& a) {
  train::ShardReader r(a.dir);
  nlohmann::json index = nlohmann::json::parse(r.index_json());
  uint64_t fim = 0, longest = 0;
  for (uint64_t i = 0; i < r.num_samples(); ++i) {
    std::vector<int32_t> ids = r.sample(i);
    fim += ids[0] == r.vocab().fim_prefix;
    longest = std::max<uint64_t>(longest, ids.size());
  }
  std::printf("%s: %zu shards, %llu samples (%llu FIM, %llu plain), %llu tokens, "
              "mean %.1f / max %llu tokens per sample\n",
              a.dir.c_str(), index["shards"].size(), (unsigned long long)r.num_samples(),
              (unsigned long long)fim, (unsigned long long)(r.num_samples() - fim),
              (unsigned long long)r.num_tokens(),
              double(r.num_tokens()) / double(std::max<uint64_t>(1, r.num_samples())),
              (unsigned long long)longest);
  std::printf("vocab %d, eos %d, fim prefix/suffix/middle %d/%d/%d\nbuild: %s\n",
              r.vocab().vocab_size, r.vocab().eos, r.vocab().fim_prefix, r.vocab().fim_suffix,
              r.vocab().fim_middle, index["build"].dump().c_str());
  std::string tok_path = a.tokenizer;
  if (tok_path.empty() && index["build"].is_object())
    tok_path = index["build"].value("tokenizer", "");
  if (tok_path.empty() || r.num_samples() == 0) return;
  EFIM_CHECK(a.sample < r.num_samples(), "--sample ", a.sample, " >= ", r.num_samples(),
             " samples");
  Tokenizer tok = load_tokenizer(tok_path);
  EFIM_CHECK(tok.vocab_size() == r.vocab().vocab_size, "tokenizer '", tok_path, "' has ",
             tok.vocab_size(), " tokens, the shards were built with ", r.vocab().vocab_size);
  print_sample(r, tok, a.sample);
}

void register_build(CLI::App& data) {
  auto o = std::make_shared<train::BuildOptions>();
  o->threads = std::min(ThreadPool::default_threads(), 4);
  auto* cmd = data.add_subcommand("build", "Corpus -> fragment-tokenized FIM token shards");
  cmd->add_option("--corpus", o->corpus_dir, "Corpus folder from scripts/build_corpus.sh")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer_label, "tokenizer.json, HF folder or .gguf")
      ->required();
  cmd->add_option("--out", o->out_dir, "Output shard folder")->required();
  cmd->add_option("--split", o->split, "train or valid")->capture_default_str();
  cmd->add_option("--seed", o->fim.seed, "Random seed")->capture_default_str();
  cmd->add_option("--fragment-rate", o->fim.fragment_rate,
                  "Cut probability after each character (0: canonical tokenization)")
      ->capture_default_str();
  cmd->add_option("--fim-rate", o->fim.fim_rate, "Share of FIM samples")->capture_default_str();
  cmd->add_option("--chunk-chars", o->fim.chunk_chars, "Characters per sample chunk")
      ->capture_default_str();
  cmd->add_option("--hole-mean", o->fim.hole_mean_chars, "Mean extra length of short holes")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", o->shard_tokens, "Tokens per shard file")
      ->capture_default_str();
  cmd->add_option("--max-docs", o->max_docs, "Use only the first N documents (0: all)");
  cmd->add_option("--threads", o->threads, "Worker threads")->capture_default_str();
  cmd->add_flag("--jsonl", o->jsonl, "Also write samples.jsonl (token ids per sample)");
  cmd->callback([o] { run_build(*o); });
}

void register_inspect_shards(CLI::App& data) {
  auto a = std::make_shared<InspectArgs>();
  auto* cmd = data.add_subcommand("inspect", "Counts of a shard folder and one decoded sample");
  cmd->add_option("dir", a->dir, "Shard folder (with index.json)")->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer for decoding (default: the one recorded in index.json)");
  cmd->add_option("--sample", a->sample, "Index of the sample to decode")->capture_default_str();
  cmd->callback([a] { run_inspect(*a); });
}

}  // namespace

void register_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Fragment-tokenized FIM training data");
  data->require_subcommand(1);
  register_build(*data);
  register_inspect_shards(*data);
}

}  // namespace efim::app
