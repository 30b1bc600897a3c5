// GGUF `tokenizer.ggml.*` metadata: loading (llama.cpp's conventions) and writing.
#include "base/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer_internal.h"

namespace efim {
namespace {

constexpr const char* kFimKeys[] = {
    "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
};
int32_t FimTokens::*const kFimFields[] = {
    &FimTokens::prefix, &FimTokens::suffix,    &FimTokens::middle,
    &FimTokens::pad,    &FimTokens::repo_name, &FimTokens::file_sep,
};

int32_t optional_id(const GgufFile& g, const std::string& key, size_t vocab) {
  const GgufValue* v = g.get(key);
  if (v == nullptr) return -1;
  const int64_t id = v->as_i64();
  EFIM_CHECK(id >= 0 && static_cast<size_t>(id) < vocab, "GGUF ", key, " = ", id,
             " out of range [0, ", vocab, ")");
  return static_cast<int32_t>(id);
}

const GgufValue& required(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.get(key);
  EFIM_CHECK(v != nullptr, "GGUF: missing ", key);
  return *v;
}

std::string family_list() {
  std::string s;
  for (const auto& f : pre_families()) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

// Tokens and their types; control, user-defined and unknown tokens become added tokens (the
// unknown one special, as in llama.cpp), the others are what BPE may produce.
void read_tokens(const GgufFile& g, TokenizerParts& p) {
  p.tokens = required(g, "tokenizer.ggml.tokens").as_strings();
  const size_t n = p.tokens.size();
  p.types.assign(n, kTokenNormal);
  if (const GgufValue* tv = g.get("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = tv->as_ints();
    EFIM_CHECK(types.size() == n, "GGUF tokenizer.ggml.token_type has ", types.size(),
               " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i) {
      EFIM_CHECK(types[i] >= 1 && types[i] <= 6, "GGUF tokenizer.ggml.token_type[", i, "] = ",
                 types[i], " is not a token type (1..6)");
      p.types[i] = static_cast<uint8_t>(types[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const uint8_t t = p.types[i];
    if (t == kTokenControl || t == kTokenUserDefined || t == kTokenUnknown) {
      p.added.push_back(AddedToken{id, p.tokens[i], t != kTokenUserDefined, false});
    } else {
      p.bpe_vocab.emplace(p.tokens[i], id);
    }
  }
}

// SentencePiece (llama.cpp "llama"): scores, dummy prefix (default on), bos on by default.
void read_spm(const GgufFile& g, TokenizerParts& p) {
  p.spm.enabled = true;
  p.spm.by_score = true;
  bool add_space = true;
  if (const GgufValue* v = g.get("tokenizer.ggml.add_space_prefix")) add_space = v->as_bool();
  p.spm.space_prefix = add_space ? SpacePrefix::kEverySegment : SpacePrefix::kNone;
  const size_t n = p.tokens.size();
  if (const GgufValue* v = g.get("tokenizer.ggml.scores")) {
    const std::vector<double> scores = v->as_floats();
    p.spm.scores.assign(scores.begin(), scores.end());
    EFIM_CHECK(p.spm.scores.size() == n, "GGUF tokenizer.ggml.scores has ", p.spm.scores.size(),
               " entries for ", n, " tokens");
  } else {
    p.spm.scores.assign(n, 0.0f);  // llama.cpp's default: merging is then leftmost-first
  }
  const GgufValue* ws = g.get("tokenizer.ggml.remove_extra_whitespaces");
  EFIM_CHECK(ws == nullptr || !ws->as_bool(),
             "GGUF tokenizer.ggml.remove_extra_whitespaces = true is not supported");
}

void read_byte_level(const GgufFile& g, TokenizerParts& p) {
  const GgufValue* pre_v = g.get("tokenizer.ggml.pre");
  const std::string pre = pre_v ? pre_v->as_string() : std::string("(absent)");
  const PreFamily* family = find_pre_family(pre);
  EFIM_CHECK(family != nullptr, "GGUF tokenizer.ggml.pre = \"", pre,
             "\" is not supported (supported: ", family_list(), ")");
  p.steps = family->steps;
  p.nfc = family->nfc;
  p.ignore_merges = family->ignore_merges;
  // llama.cpp adds bos by default for llama-bpe; the key overrides.
  p.add_bos = family->name == "llama-bpe";
  const std::vector<std::string> merges = required(g, "tokenizer.ggml.merges").as_strings();
  p.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ', 1);
    EFIM_CHECK(sp != std::string::npos, "GGUF tokenizer.ggml.merges[", r, "] = \"", merges[r],
               "\" is not two tokens");
    p.merges.emplace_back(merges[r].substr(0, sp), merges[r].substr(sp + 1));
  }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& g) {
  TokenizerParts p;
  p.label = "GGUF tokenizer";
  const std::string model = required(g, "tokenizer.ggml.model").as_string();
  EFIM_CHECK(model == "gpt2" || model == "llama", "GGUF tokenizer.ggml.model = \"", model,
             "\" is not supported (only \"gpt2\", byte-level BPE, and \"llama\", SentencePiece)");
  read_tokens(g, p);
  const size_t n = p.tokens.size();
  if (model == "llama") {
    read_spm(g, p);
    p.add_bos = true;  // llama.cpp's default for SentencePiece; the key overrides
    p.bos = 1, p.eos = 2, p.unk = 0;  // llama.cpp's defaults, checked against the vocabulary below
    for (int32_t* id : {&p.bos, &p.eos, &p.unk})
      if (static_cast<size_t>(*id) >= n) *id = -1;
  } else {
    read_byte_level(g, p);
  }
  for (auto [key, dst] : {std::pair{"tokenizer.ggml.bos_token_id", &p.bos},
                          std::pair{"tokenizer.ggml.eos_token_id", &p.eos},
                          std::pair{"tokenizer.ggml.padding_token_id", &p.pad},
                          std::pair{"tokenizer.ggml.unknown_token_id", &p.unk}}) {
    if (g.get(key) != nullptr) *dst = optional_id(g, key, n);
  }
  if (const GgufValue* ab = g.get("tokenizer.ggml.add_bos_token")) p.add_bos = ab->as_bool();
  for (size_t k = 0; k < std::size(kFimKeys); ++k) {
    p.fim_keys.*kFimFields[k] = optional_id(g, kFimKeys[k], n);
  }
  p.eot_key = optional_id(g, "tokenizer.ggml.eot_token_id", n);
  return build(std::move(p));
}

// llama.cpp's "llama" vocabulary: tokens, scores and types (byte tokens 6, <unk> 2).
void Tokenizer::write_gguf_spm(GgufWriter& w) const {
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_strings("tokenizer.ggml.tokens", tokens_);
  w.set_f32s("tokenizer.ggml.scores", spm_scores());
  std::vector<int32_t> types(types_.begin(), types_.end());
  w.set_i32s("tokenizer.ggml.token_type", types);
  EFIM_CHECK(space_prefix_ == SpacePrefix::kNone || space_prefix_ == SpacePrefix::kEverySegment,
             "tokenizer: a Metaspace dummy prefix has no GGUF equivalent (llama.cpp adds it after "
             "every special token)");
  w.set_bool("tokenizer.ggml.add_space_prefix", space_prefix_ == SpacePrefix::kEverySegment);
  if (unk_ >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(unk_));
}

void Tokenizer::write_gguf_metadata(GgufWriter& w) const {
  if (sentencepiece_) {
    write_gguf_spm(w);
  } else {
    write_gguf_byte_level(w);
  }
  if (bos_ >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos_));
  if (eos_ >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos_));
  if (pad_ >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(pad_));
  w.set_bool("tokenizer.ggml.add_bos_token", add_bos_);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  for (size_t k = 0; k < std::size(kFimKeys); ++k) {
    const int32_t id = fim_.*kFimFields[k];
    if (id >= 0) w.set_u32(kFimKeys[k], static_cast<uint32_t>(id));
  }
  if (fim_.eot >= 0) w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(fim_.eot));
}

void Tokenizer::write_gguf_byte_level(GgufWriter& w) const {
  EFIM_CHECK(!pre_name_.empty(),
             "tokenizer: this pre-tokenizer has no GGUF tokenizer.ggml.pre name (known: ",
             family_list(), ")");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre_name_);
  w.set_strings("tokenizer.ggml.tokens", tokens_);
  std::vector<int32_t> types(types_.begin(), types_.end());
  w.set_i32s("tokenizer.ggml.token_type", types);
  std::vector<std::string> merges;
  merges.reserve(merges_.size());
  for (const BpeMerge& m : merges_) merges.push_back(tokens_[m.left] + " " + tokens_[m.right]);
  w.set_strings("tokenizer.ggml.merges", merges);
}

}  // namespace efim
