#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace efim {
namespace {

// Known sentinel spellings per family, checked in order after the GGUF keys.
struct FimNames {
  int32_t FimTokens::*field;
  std::vector<std::string_view> names;
};
const std::vector<FimNames>& fim_names() {
  static const std::vector<FimNames> names = {
      // CodeLlama's SentencePiece vocabulary spells them with the word-start mark "▁".
      {&FimTokens::prefix, {"<fim_prefix>", "<|fim_prefix|>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>"}},
      {&FimTokens::suffix, {"<fim_suffix>", "<|fim_suffix|>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>"}},
      {&FimTokens::middle, {"<fim_middle>", "<|fim_middle|>", "<｜fim▁end｜>", "<MID>", "▁<MID>"}},
      {&FimTokens::pad, {"<fim_pad>", "<|fim_pad|>"}},
      {&FimTokens::repo_name, {"<|repo_name|>", "<repo_name>"}},
      {&FimTokens::file_sep, {"<|file_sep|>", "<file_sep>", "<|file_separator|>"}},
      {&FimTokens::eot,
       {"<EOT>", "▁<EOT>", "<|endoftext|>", "<｜end▁of▁sentence｜>", "<|eot_id|>"}},
  };
  return names;
}

// Spellings that end a generation in the families efim serves (llama.cpp's end-of-generation
// list): Qwen's chat end <|im_end|> next to <|endoftext|>, Llama 3's <|eot_id|> and
// <|end_of_text|>, Gemma's <end_of_turn> and CodeGemma's <|file_separator|>, CodeLlama's
// <EOT>, DeepSeek's end of sentence, SentencePiece's </s>.
constexpr std::string_view kEndSpellings[] = {
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>",
    "<|end|>", "<end_of_turn>", "<|file_separator|>", "<EOT>", "▁<EOT>",
    "<｜end▁of▁sentence｜>", "</s>", "<|fim_pad|>", "<fim_pad>"};

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space

// What a SentencePiece token decodes to: its byte for <0xXX> byte tokens, else the spelling
// with every "▁" turned back into a space (Hugging Face's Replace + ByteFallback decoders).
std::string spm_piece(std::string_view spelling, uint8_t type) {
  if (type == kTokenByte) {
    const int b = parse_byte_token(spelling);
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  std::string out;
  for (size_t i = 0; i < spelling.size();) {
    if (spelling.substr(i, kSpace.size()) == kSpace) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(spelling[i++]);
    }
  }
  return out;
}

}  // namespace

int parse_byte_token(std::string_view t) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Spellings, decoded bytes and the spelling -> id map.
void Tokenizer::init_vocab(TokenizerParts& p) {
  const size_t n = p.tokens.size();
  EFIM_CHECK(n > 0, p.label, ": empty vocabulary");
  EFIM_CHECK(p.types.size() == n, p.label, ": ", p.types.size(), " token types for ", n,
             " tokens");
  tokens_ = std::move(p.tokens);
  types_ = std::move(p.types);
  pieces_.resize(n);
  std::string bytes;
  for (size_t id = 0; id < n; ++id) {
    ids_.emplace(tokens_[id], static_cast<int32_t>(id));  // first id wins on duplicates
    if (p.spm.enabled) {
      pieces_[id] = spm_piece(tokens_[id], types_[id]);
      continue;
    }
    // Hugging Face's ByteLevel decoder: the bytes when every character is a byte character,
    // else the spelling itself (added tokens such as "<｜fim▁begin｜>").
    pieces_[id] = unicode::byte_level_to_bytes(tokens_[id], bytes) ? bytes : tokens_[id];
  }
  for (const auto& a : p.added) {
    EFIM_CHECK(a.id >= 0 && static_cast<size_t>(a.id) < n, p.label, ": added token \"",
               a.content, "\" id ", a.id, " out of range [0, ", n, ")");
    EFIM_CHECK(!a.content.empty(), p.label, ": added token ", a.id, " is empty");
    EFIM_CHECK(unicode::is_valid_utf8(a.content), p.label, ": added token ", a.id,
               " is not valid UTF-8");
  }
  added_ = std::move(p.added);
}

// Merges from spellings to ids, and the BPE model over raw bytes (byte-level) or over
// "▁"-escaped characters (SentencePiece-style, by rank).
void Tokenizer::init_bpe(TokenizerParts& p) {
  if (p.spm.by_score) return;  // no merge list: SpmScoreModel (init_spm) does the merging
  const size_t n = tokens_.size();
  std::unordered_map<std::string, int32_t> piece_ids;
  std::string bytes;
  for (const auto& [text, id] : p.bpe_vocab) {
    EFIM_CHECK(id >= 0 && static_cast<size_t>(id) < n, p.label, ": vocab id ", id,
               " of \"", text, "\" out of range [0, ", n, ")");
    if (p.spm.enabled) {
      piece_ids.emplace(text, id);
    } else if (unicode::byte_level_to_bytes(text, bytes)) {
      piece_ids.emplace(bytes, id);
    }
  }
  merges_.reserve(p.merges.size());
  for (size_t r = 0; r < p.merges.size(); ++r) {
    const auto& [a, b] = p.merges[r];
    auto ia = p.bpe_vocab.find(a), ib = p.bpe_vocab.find(b), ic = p.bpe_vocab.find(a + b);
    EFIM_CHECK(ia != p.bpe_vocab.end() && ib != p.bpe_vocab.end() && ic != p.bpe_vocab.end(),
               p.label, ": merge ", r, " \"", a, " ", b, "\": ",
               ia == p.bpe_vocab.end() ? a : ib == p.bpe_vocab.end() ? b : a + b,
               " is not in the vocabulary");
    merges_.push_back(BpeMerge{ia->second, ib->second, ic->second});
  }
  BpeOptions opts{.ignore_merges = p.ignore_merges};
  if (p.spm.enabled) {
    opts.char_symbols = true;
    opts.byte_tokens = spm_byte_tokens(p.label, /*all=*/false);
    opts.unk = p.unk;
  }
  bpe_ = BpeModel(std::move(piece_ids), merges_, opts);
}

// The <0xXX> token of every byte, -1 where missing (Gemma's vocabulary lacks <0x09>: "\t" is a
// token). `all` (llama.cpp's byte fallback, which has no unknown-token escape): a missing one is
// the byte's own one-character token, as llama.cpp's byte_to_token does, and must exist.
std::array<int32_t, 256> Tokenizer::spm_byte_tokens(const std::string& label, bool all) const {
  std::array<int32_t, 256> ids{};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto id = token_id(name);
    if (!id && all) id = token_id(std::string(1, static_cast<char>(b)));
    EFIM_CHECK(id.has_value() || !all, label, ": SentencePiece vocabulary without the byte token ",
               name, " (byte fallback needs all 256)");
    ids[b] = id.value_or(-1);
  }
  return ids;
}

// SentencePiece-style settings; by score, the mergeable pieces are the normal tokens.
void Tokenizer::init_spm(TokenizerParts& p) {
  sentencepiece_ = p.spm.enabled;
  if (!sentencepiece_) return;
  by_score_ = p.spm.by_score;
  space_prefix_ = p.spm.space_prefix;
  split_words_ = p.spm.split_words;
  if (!by_score_) return;
  EFIM_CHECK(p.spm.scores.size() == tokens_.size(), p.label, ": ", p.spm.scores.size(),
             " scores for ", tokens_.size(), " tokens");
  std::unordered_map<std::string, int32_t> pieces;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (types_[id] == kTokenNormal) pieces.emplace(tokens_[id], static_cast<int32_t>(id));
  }
  spm_ = SpmScoreModel(std::move(pieces), std::move(p.spm.scores),
                       spm_byte_tokens(p.label, /*all=*/true));
}

// The piece scores a GGUF gets. A tokenizer.json vocabulary (merged by rank; llama.cpp merges a
// GGUF by score) gets them from the merge ranks: the first merge that forms a token gives it
// score -rank, so that merging by score follows the rank order; tokens no merge forms get the
// lowest score.
std::vector<float> Tokenizer::spm_scores() const {
  if (by_score_) return spm_.scores();
  std::vector<float> scores(tokens_.size(), -1e9f);
  for (size_t r = merges_.size(); r-- > 0;) scores[merges_[r].result] = -static_cast<float>(r);
  return scores;
}

Tokenizer Tokenizer::build(TokenizerParts p) {
  Tokenizer t;
  t.init_vocab(p);
  t.init_bpe(p);
  t.init_spm(p);
  t.pre_ = PreTokenizer(p.steps);
  t.nfc_ = p.nfc;
  const PreFamily* family = find_pre_family(p.steps, p.nfc);
  t.pre_name_ = family ? std::string(family->name) : std::string();
  for (int32_t id : {p.bos, p.eos, p.pad, p.unk}) {
    EFIM_CHECK(id < t.vocab_size(), p.label, ": bos/eos/pad/unk id ", id, " out of range [0, ",
               t.vocab_size(), ")");
  }
  t.bos_ = p.bos;
  t.eos_ = p.eos;
  t.pad_ = p.pad;
  t.unk_ = p.unk;
  t.add_bos_ = p.add_bos && p.bos >= 0;
  t.fim_ = p.fim_keys;
  t.fim_.eot = p.eot_key;
  t.detect_fim();
  for (int ps = 0; ps < 2; ++ps) {
    t.raw_[ps] = t.make_matcher(false, ps == 1);
    t.normalized_[ps] = t.make_matcher(true, ps == 1);
  }
  return t;
}

// Fills the sentinels the GGUF keys did not name from their spellings, then makes each
// sentinel special so that user text can never produce it.
void Tokenizer::detect_fim() {
  for (const auto& f : fim_names()) {
    if (fim_.*f.field >= 0) continue;
    for (std::string_view name : f.names) {
      if (auto id = token_id(name)) {
        fim_.*f.field = *id;
        break;
      }
    }
  }
  if (fim_.eot < 0) fim_.eot = eos_;
  for (int32_t id : {fim_.prefix, fim_.suffix, fim_.middle, fim_.pad, fim_.repo_name,
                     fim_.file_sep}) {
    if (id < 0) continue;
    EFIM_CHECK(id < vocab_size(), "tokenizer: FIM token id ", id, " out of range [0, ",
               vocab_size(), ")");
    for (auto& a : added_) {
      if (a.id == id) a.special = true;
    }
    if (types_[id] == kTokenUserDefined) types_[id] = kTokenControl;
  }
  for (const auto& a : added_) {
    if (types_[a.id] == kTokenUnknown) continue;  // <unk> keeps its type (special all the same)
    types_[a.id] = a.special ? kTokenControl : kTokenUserDefined;
  }
  // End of generation, once the token types are final.
  eog_.clear();
  for (int32_t id : {eos_, fim_.eot})
    if (id >= 0) eog_.push_back(id);
  // Only control tokens: Qwen's vocabulary also has "</s>" as ordinary text (HTML).
  for (std::string_view name : kEndSpellings)
    if (auto id = token_id(name); id && types_[*id] == kTokenControl) eog_.push_back(*id);
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

Tokenizer::Matcher Tokenizer::make_matcher(bool normalized, bool with_special) const {
  Matcher m;
  m.by_first.resize(256);
  for (size_t k = 0; k < added_.size(); ++k) {
    const AddedToken& a = added_[k];
    if (a.normalized != normalized || (a.special && !with_special)) continue;
    m.by_first[static_cast<uint8_t>(a.content[0])].push_back(static_cast<int32_t>(k));
    m.empty = false;
  }
  for (auto& list : m.by_first) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t x, int32_t y) {
      return added_[x].content.size() > added_[y].content.size();
    });
  }
  return m;
}

void Tokenizer::split_added(std::string_view text, const Matcher& m,
                            std::vector<Segment>& out) const {
  out.clear();
  const auto size = static_cast<uint32_t>(text.size());
  if (m.empty) {
    if (size > 0) out.push_back({0, size, -1});
    return;
  }
  uint32_t gap = 0;
  for (uint32_t i = 0; i < size;) {
    const AddedToken* hit = nullptr;
    for (int32_t k : m.by_first[static_cast<uint8_t>(text[i])]) {
      const std::string& c = added_[k].content;
      if (text.substr(i, c.size()) == c) {
        hit = &added_[k];
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (gap < i) out.push_back({gap, i, -1});
    const auto len = static_cast<uint32_t>(hit->content.size());
    out.push_back({i, i + len, hit->id});
    i += len;
    gap = i;
  }
  if (gap < size) out.push_back({gap, size, -1});
}

void Tokenizer::encode_text(std::string_view text, const EncodeOptions& opts,
                            std::vector<int32_t>& out) const {
  const int ps = opts.parse_special ? 1 : 0;
  std::vector<Segment> raw, norm;
  std::vector<Piece> pieces;
  split_added(text, raw_[ps], raw);
  for (const Segment& s : raw) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    std::string_view seg = text.substr(s.begin, s.end - s.begin);
    if (sentencepiece_) {
      const bool prefix =
          opts.space_prefix &&
          (space_prefix_ == SpacePrefix::kEverySegment ||
           (space_prefix_ == SpacePrefix::kMetaspaceAlways && seg[0] != ' ') ||
           (space_prefix_ == SpacePrefix::kMetaspaceFirst && seg[0] != ' ' && s.begin == 0));
      encode_spm(seg, prefix, out);
      continue;
    }
    std::string normalized;
    if (nfc_) {
      normalized = unicode::nfc(seg);
      seg = normalized;
    }
    split_added(seg, normalized_[ps], norm);
    for (const Segment& t : norm) {
      if (t.id >= 0) {
        out.push_back(t.id);
        continue;
      }
      std::string_view sub = seg.substr(t.begin, t.end - t.begin);
      pieces.clear();
      pre_.split(sub, pieces);
      for (const Piece& p : pieces) bpe_.encode(sub.substr(p.first, p.second - p.first), out);
    }
  }
}

// One text segment of a SentencePiece-style vocabulary: " " -> "▁", the dummy prefix, then
// merging (by score or by rank) over the whole segment, or word by word for Metaspace split.
void Tokenizer::encode_spm(std::string_view text, bool prefix, std::vector<int32_t>& out) const {
  std::string esc;
  esc.reserve(text.size() + 16);
  if (prefix) esc.append(kSpace);
  for (char c : text) {
    if (c == ' ') {
      esc.append(kSpace);
    } else {
      esc.push_back(c);
    }
  }
  auto merge = [&](std::string_view word) {
    if (by_score_) {
      spm_.encode(word, out);
    } else {
      bpe_.encode(word, out);
    }
  };
  if (!split_words_) {
    merge(esc);
    return;
  }
  // Metaspace split (MergedWithNext): a new word starts at each "▁".
  size_t start = 0;
  for (size_t i = kSpace.size(); i < esc.size(); ++i) {
    if (std::string_view(esc).substr(i, kSpace.size()) != kSpace) continue;
    merge(std::string_view(esc).substr(start, i - start));
    start = i;
    i += kSpace.size() - 1;
  }
  if (start < esc.size()) merge(std::string_view(esc).substr(start));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (opts.add_bos && bos_ >= 0) out.push_back(bos_);
  if (unicode::is_valid_utf8(text)) {
    encode_text(text, opts, out);
  } else {
    const std::string fixed = unicode::to_valid_utf8(text);
    encode_text(fixed, opts, out);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& opts) const {
  std::string out;
  for (int32_t id : ids) {
    if (opts.skip_special && is_special(id)) continue;
    out.append(token_bytes(id));
  }
  return out;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  EFIM_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " out of range [0, ",
             vocab_size(), ")");
  return tokens_[id];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  EFIM_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " out of range [0, ",
             vocab_size(), ")");
  return pieces_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  EFIM_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " out of range [0, ",
             vocab_size(), ")");
  return types_[id] == kTokenControl || types_[id] == kTokenUnknown;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  auto it = ids_.find(std::string(text));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string IncrementalDecoder::push(int32_t id) {
  if (opts_.skip_special && tok_->is_special(id)) return {};
  return push_bytes(tok_->token_bytes(id));
}

std::string IncrementalDecoder::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  const size_t keep = unicode::incomplete_tail(pending_);
  std::string out = unicode::to_valid_utf8(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = unicode::to_valid_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace efim
