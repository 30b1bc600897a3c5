// FIM training samples with fragment tokenization (docs/efim-method.md section 3).
//
// A document is cut into chunks of `chunk_chars` characters (Unicode code points; the last
// chunk is shorter). Each chunk becomes one sample, as for the base model efim-base-py:
//   - with probability fim_rate a FIM sample in PSM order
//       <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle <eos>
//     whose middle (the hole) is, with probability short_hole_share, a short hole of
//     1 + floor(Exp(hole_mean_chars)) characters (capped at the chunk) at a uniform position,
//     otherwise the span between two uniform cut points in [0, n] (it may be empty);
//   - otherwise a plain sample: text <eos>.
// Prefix, suffix and middle are tokenized separately. Fragment tokenization: each part is cut
// after each of its characters (except the last) independently with probability
// fragment_rate, each fragment is tokenized on its own and the ids are concatenated. Fragments
// then average 1 / fragment_rate characters, and rate 0 gives the canonical tokenization of each
// part. Decoding the ids of a part always gives its text back byte for byte.
//
// Determinism: a document's samples depend only on (options, its text, its key) -- not on the
// other documents or on threads. The FIM layout and the fragment cuts use separate random
// streams, so the same seed gives the same layouts at every fragment rate.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "train/data/rng.h"

namespace efim::train {

struct FimOptions {
  uint64_t seed = 0;
  size_t chunk_chars = 3000;      // characters per chunk
  double fim_rate = 0.85;         // share of chunks made FIM samples (the rest plain)
  double short_hole_share = 0.5;  // of FIM samples: short hole; the rest two uniform cuts
  double hole_mean_chars = 40;    // short hole = 1 + floor(Exp(mean)) characters
  double fragment_rate = 0.005;   // cut probability after each character; 0 = canonical
};

enum class SampleKind : uint8_t { plain = 0, fim_short = 1, fim_span = 2 };
const char* kind_name(SampleKind kind);  // "plain", "fim-short", "fim-span"

// Where the hole is, in characters of the chunk: middle = [hole_begin, hole_end).
struct FimLayout {
  SampleKind kind = SampleKind::plain;
  size_t hole_begin = 0, hole_end = 0;  // plain: unused (0, 0)
};

struct Sample {
  SampleKind kind = SampleKind::plain;
  // Views into the document text passed to SampleBuilder::document (valid while it lives).
  // Plain samples hold their whole text in `middle`.
  std::string_view prefix, suffix, middle;
  std::vector<int32_t> tokens;  // the complete sample, sentinels and <eos> included
  uint32_t fragments = 0;       // tokenizer calls made for the sample's text
};

// Byte offset of each character of valid UTF-8 `text`, then text.size() ([n_chars + 1]).
std::vector<size_t> char_starts(std::string_view text);

// Splits valid UTF-8 `text` into chunks of `chunk_chars` characters (the last may be shorter).
std::vector<std::string_view> chunk_text(std::string_view text, size_t chunk_chars);

// Draws the layout of a chunk of n_chars >= 1 characters.
FimLayout draw_layout(size_t n_chars, const FimOptions& opts, Rng& rng);

// Appends the fragment tokenization of valid UTF-8 `text` to out; returns the fragment count
// (0 for empty text). rate 0 appends exactly tok.encode(text).
uint32_t encode_fragmented(const Tokenizer& tok, std::string_view text, double rate, Rng& rng,
                           std::vector<int32_t>& out);

class SampleBuilder {
 public:
  // Checks the options and that the tokenizer has <eos> and the three FIM sentinels.
  SampleBuilder(const Tokenizer& tok, FimOptions opts);
  // The samples of one document, in chunk order. `label` names the document in errors and
  // keys its random streams (use a stable name such as the corpus path). Throws on invalid
  // UTF-8.
  std::vector<Sample> document(std::string_view text, std::string_view label) const;
  const FimOptions& options() const { return opts_; }

 private:
  Sample make_sample(std::string_view chunk, Rng& layout_rng, Rng& frag_rng) const;
  const Tokenizer* tok_;
  FimOptions opts_;
  int32_t eos_, prefix_id_, suffix_id_, middle_id_;
};

}  // namespace efim::train
