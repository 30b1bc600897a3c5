// `efim data build`: a corpus directory (scripts/build_corpus.sh) -> token shards.
//
// The corpus directory holds manifest.tsv (columns path, package, bytes, sha256, split; one
// header line) and files/<path>. The documents of one split are read in manifest order, turned
// into samples by SampleBuilder (in parallel; the output does not depend on the thread count)
// and appended to a ShardWriter in that order. With `jsonl`, samples.jsonl gets one line per
// sample: {"doc": path, "chunk": k, "kind": "fim-short", "fragments": n, "tokens": [ids]}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "train/data/fim_sample.h"

namespace efim::train {

struct CorpusDoc {
  std::string path;  // relative to <corpus>/files
  std::string package;
  uint64_t bytes = 0;
  std::string sha256;
  std::string split;  // "train" or "valid"
};

// Reads <dir>/manifest.tsv, keeping the rows of `split` ("" keeps all). Throws on a malformed
// row, naming the line and the field.
std::vector<CorpusDoc> read_manifest(const std::string& dir, const std::string& split);

struct BuildOptions {
  std::string corpus_dir;
  std::string out_dir;
  std::string split = "train";
  std::string tokenizer_label;      // recorded in index.json (where the tokenizer came from)
  FimOptions fim;
  uint64_t shard_tokens = uint64_t{1} << 26;
  bool jsonl = false;               // also write <out_dir>/samples.jsonl
  int threads = 1;
  uint64_t max_docs = 0;            // 0: all documents of the split
  bool progress = true;             // progress bar on stderr (drawn only on a terminal)
};

struct BuildStats {
  uint64_t docs = 0, bytes = 0, samples = 0, tokens = 0, fragments = 0;
  uint64_t kind_count[3] = {0, 0, 0};  // by SampleKind
  double seconds = 0;
};

BuildStats build_shards(const Tokenizer& tok, const BuildOptions& opts);

}  // namespace efim::train
