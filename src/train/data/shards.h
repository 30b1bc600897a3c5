// Token shards: what `efim data build` writes and the trainer reads.
//
// A shard directory holds index.json (totals, the options that built it, the shard list) and
// shard files `shard-NNNNN.bin`. One shard file, all integers little-endian:
//
//   offset 0   char[8]  magic "EFIMSHRD"
//          8   u32      version (1)
//         12   u32      token_bytes: 2 (uint16 ids) or 4 (uint32 ids)
//         16   u64      n_samples
//         24   u64      n_tokens
//         32   i32      vocab_size (every id is < vocab_size)
//         36   i32      eos, fim_prefix, fim_suffix, fim_middle (-1 when absent)
//         52   u8[12]   zero
//         64   tokens   n_tokens * token_bytes, then zero padding to a multiple of 8 bytes
//              offsets  (n_samples + 1) u64: sample i is tokens [offsets[i], offsets[i+1]);
//                       offsets[0] == 0, strictly increasing, offsets[n_samples] == n_tokens
//   the file ends there (its size is checked exactly).
//
// A sample is one chunk of a document, complete and ending with EOS:
//   FIM (PSM):  <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle <eos>
//   plain:      text <eos>
// ShardReader validates every field, offset and token id when it opens a file and throws
// efim::Error naming the file, the field and the values on anything malformed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/mmap_file.h"

namespace efim::train {

inline constexpr char kShardMagic[8] = {'E', 'F', 'I', 'M', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

// Token ids a reader needs without the tokenizer (copied from Tokenizer::eos() / fim()).
struct ShardVocab {
  int32_t vocab_size = 0;
  int32_t eos = -1;
  int32_t fim_prefix = -1, fim_suffix = -1, fim_middle = -1;
};

// ---- writing --------------------------------------------------------------------------

struct ShardWriterOptions {
  uint64_t shard_tokens = uint64_t{1} << 26;  // start a new shard file past this many tokens
  std::string index_extra_json = "{}";        // stored as index.json "build" (options, corpus)
};

// Appends samples to shard files in `dir` (created if missing); finish() writes index.json.
class ShardWriter {
 public:
  ShardWriter(std::string dir, ShardVocab vocab, ShardWriterOptions opts = {});
  ~ShardWriter();  // closes an unfinished shard without writing index.json
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Throws when the sample is empty or an id is outside [0, vocab_size).
  void add(std::span<const int32_t> tokens);
  void finish();

  uint64_t samples() const { return total_samples_; }
  uint64_t tokens() const { return total_tokens_; }

 private:
  void close_shard();
  struct ShardInfo {
    std::string file;
    uint64_t samples, tokens;
  };
  std::string dir_;
  ShardVocab vocab_;
  ShardWriterOptions opts_;
  uint32_t token_bytes_;
  std::vector<uint8_t> tokens_;   // current shard's encoded ids
  std::vector<uint64_t> offsets_; // current shard's sample offsets, starts {0}
  std::vector<ShardInfo> shards_;
  uint64_t total_samples_ = 0, total_tokens_ = 0;
  bool finished_ = false;
};

// ---- reading --------------------------------------------------------------------------

// One validated, memory-mapped shard file.
class Shard {
 public:
  explicit Shard(const std::string& path);
  uint64_t num_samples() const { return n_samples_; }
  uint64_t num_tokens() const { return n_tokens_; }
  uint64_t sample_size(uint64_t i) const;  // tokens in sample i
  // Appends sample i's ids to out.
  void append_sample(uint64_t i, std::vector<int32_t>& out) const;
  const ShardVocab& vocab() const { return vocab_; }
  uint32_t token_bytes() const { return token_bytes_; }

 private:
  uint64_t offset(uint64_t i) const;  // offsets[i], i <= n_samples
  MappedFile file_;
  ShardVocab vocab_;
  uint32_t token_bytes_ = 0;
  uint64_t n_samples_ = 0, n_tokens_ = 0;
  const uint8_t* tokens_ = nullptr;
  const uint8_t* offsets_ = nullptr;
};

// All shards of a directory (listed by its index.json), as one sequence of samples.
class ShardReader {
 public:
  explicit ShardReader(const std::string& dir);
  uint64_t num_samples() const { return n_samples_; }
  uint64_t num_tokens() const { return n_tokens_; }
  const ShardVocab& vocab() const { return vocab_; }
  uint64_t sample_size(uint64_t i) const;
  std::vector<int32_t> sample(uint64_t i) const;
  void append_sample(uint64_t i, std::vector<int32_t>& out) const;
  const std::string& index_json() const { return index_json_; }  // the raw index.json text
  const std::string& dir() const { return dir_; }

 private:
  std::pair<const Shard*, uint64_t> locate(uint64_t i) const;  // shard and index within it
  std::string dir_, index_json_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<uint64_t> first_sample_;  // [shards + 1] global index of each shard's sample 0
  uint64_t n_samples_ = 0, n_tokens_ = 0;
  ShardVocab vocab_;
};

// ---- packing for training -------------------------------------------------------------

// Which next-token targets count in the loss.
enum class LossMask {
  all,     // every target (what the base model was trained with)
  middle,  // FIM samples: only targets after <fim_middle> (the middle and its <eos>);
           // plain samples: every target except their first token
};

struct SamplerOptions {
  int64_t batch = 8;    // B rows per batch
  int64_t seq = 1024;   // T: a row holds T + 1 ids (inputs = row[0..T), targets = row[1..T])
  uint64_t seed = 0;    // shuffles the sample order, a new permutation each epoch
  LossMask mask = LossMask::all;
};

struct Batch {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> tokens;  // [B, T + 1] row-major
  std::vector<uint8_t> mask;    // [B, T]: mask[b, t] = 1 when target tokens[b, t + 1] counts
  uint64_t epoch = 0;           // epoch of the row's last token
};

// Packs samples into fixed-length rows. Each epoch visits every sample once in an order
// shuffled by (seed, epoch); samples are concatenated (each ends with <eos>, which separates
// them) and the stream is cut into consecutive rows of T + 1 ids, running on into the next
// epoch. The sequence of batches is a function of (reader contents, options) alone.
class SequenceSampler {
 public:
  // `reader` must outlive the sampler.
  SequenceSampler(const ShardReader& reader, SamplerOptions opts);
  Batch next();
  // Advances as if next() had been called n times (to resume a run at a step).
  void skip(uint64_t n);
  uint64_t epoch() const { return epoch_; }
  // Tokens of one epoch / tokens per batch: how many batches make an epoch.
  double batches_per_epoch() const;

 private:
  // Copies the next `want` ids of the stream (and their target flags unless flags is null).
  void fill_row(int32_t* ids, uint8_t* flags, int64_t want);
  void start_epoch();
  void load_current();
  const ShardReader* reader_;
  SamplerOptions opts_;
  uint64_t epoch_ = 0;
  std::vector<uint64_t> order_;    // [samples] this epoch's permutation
  uint64_t pos_ = 0;               // index into order_ of the current sample
  std::vector<int32_t> cur_;       // the current sample's ids
  std::vector<uint8_t> cur_flag_;  // [cur_] 1 when the id counts as a target
  uint64_t cur_off_ = 0;           // next id of cur_ to emit
};

// Target flags of one sample under a mask mode (flags[i] for predicting ids[i]).
std::vector<uint8_t> target_flags(std::span<const int32_t> ids, const ShardVocab& vocab,
                                  LossMask mask);

}  // namespace efim::train
