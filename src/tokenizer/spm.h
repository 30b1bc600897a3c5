// SentencePiece BPE by piece score: the algorithm of SentencePiece's BPE model and of llama.cpp's
// "spm" vocabularies (GGUF tokenizer.ggml.model = "llama": CodeLlama, Codestral, CodeGemma).
//
// The input is already escaped (" " -> "▁", dummy prefix added by the caller). It is split into
// UTF-8 characters; then, repeatedly, the adjacent pair whose concatenation is a token with the
// highest score is merged (leftmost among equal scores) until no adjacent pair forms a token.
// A remaining character without a token becomes the <0xXX> tokens of its bytes.
//
// Unlike rank-based BPE (bpe.h) there is no merge list: any pair whose concatenation is a
// mergeable token merges. Mergeable tokens are the normal ones: control, user-defined, unknown
// and byte tokens never come out of merging text, so a literal "</s>" or "<0x41>" in user text
// stays text (llama.cpp would merge into them; see the tokenizer README).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace efim {

class SpmScoreModel {
 public:
  SpmScoreModel() = default;
  // `pieces`: spelling -> id of every mergeable token; `scores`: [vocab] per-id score;
  // `byte_tokens[b]`: id of the <0xXX> token of byte b (all 256 set).
  SpmScoreModel(std::unordered_map<std::string, int32_t> pieces, std::vector<float> scores,
                const std::array<int32_t, 256>& byte_tokens);

  // Appends the ids of `escaped` (non-empty) to `out`.
  void encode(std::string_view escaped, std::vector<int32_t>& out) const;
  const std::vector<float>& scores() const { return scores_; }

 private:
  int32_t find(std::string_view text) const;  // -1 when not a mergeable token

  std::unordered_map<std::string, int32_t> pieces_;
  std::vector<float> scores_;  // [vocab]
  std::array<int32_t, 256> byte_tokens_{};
  size_t max_piece_bytes_ = 0;  // longest mergeable spelling: longer pairs cannot be tokens
};

}  // namespace efim
