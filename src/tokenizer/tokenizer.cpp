#include "tokenizer/tokenizer.h"

#include <algorithm>

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

}  // namespace

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

// Merges from spellings to ids, and the BPE model over raw bytes.
void Tokenizer::init_bpe(TokenizerParts& p) {
  const size_t n = tokens_.size();
  std::unordered_map<std::string, int32_t> piece_ids;
  std::string bytes;
  for (const auto& [text, id] : p.bpe_vocab) {
    EFIM_CHECK(id >= 0 && static_cast<size_t>(id) < n, p.label, ": vocab id ", id,
               " of \"", text, "\" out of range [0, ", n, ")");
    if (unicode::byte_level_to_bytes(text, bytes)) piece_ids.emplace(bytes, id);
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
  bpe_ = BpeModel(std::move(piece_ids), merges_, p.ignore_merges);
}

Tokenizer Tokenizer::build(TokenizerParts p) {
  Tokenizer t;
  t.init_vocab(p);
  t.init_bpe(p);
  t.pre_ = PreTokenizer(p.steps);
  t.nfc_ = p.nfc;
  const PreFamily* family = find_pre_family(p.steps, p.nfc);
  t.pre_name_ = family ? std::string(family->name) : std::string();
  for (int32_t id : {p.bos, p.eos, p.pad}) {
    EFIM_CHECK(id < t.vocab_size(), p.label, ": bos/eos/pad id ", id, " out of range [0, ",
               t.vocab_size(), ")");
  }
  t.bos_ = p.bos;
  t.eos_ = p.eos;
  t.pad_ = p.pad;
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
  return types_[id] == kTokenControl;
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
