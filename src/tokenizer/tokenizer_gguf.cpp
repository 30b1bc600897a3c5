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

// Tokens and their types; control and user-defined tokens become added tokens, the others
// are what BPE may produce.
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
    if (p.types[i] == kTokenControl || p.types[i] == kTokenUserDefined) {
      p.added.push_back(AddedToken{id, p.tokens[i], p.types[i] == kTokenControl, false});
    } else {
      p.bpe_vocab.emplace(p.tokens[i], id);
    }
  }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& g) {
  TokenizerParts p;
  p.label = "GGUF tokenizer";
  const std::string model = required(g, "tokenizer.ggml.model").as_string();
  EFIM_CHECK(model == "gpt2", "GGUF tokenizer.ggml.model = \"", model,
             "\" is not supported (only \"gpt2\", byte-level BPE)");
  const GgufValue* pre_v = g.get("tokenizer.ggml.pre");
  const std::string pre = pre_v ? pre_v->as_string() : std::string("(absent)");
  const PreFamily* family = find_pre_family(pre);
  EFIM_CHECK(family != nullptr, "GGUF tokenizer.ggml.pre = \"", pre,
             "\" is not supported (supported: ", family_list(), ")");
  p.steps = family->steps;
  p.nfc = family->nfc;
  p.ignore_merges = family->ignore_merges;

  read_tokens(g, p);
  const size_t n = p.tokens.size();
  const std::vector<std::string> merges = required(g, "tokenizer.ggml.merges").as_strings();
  p.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ', 1);
    EFIM_CHECK(sp != std::string::npos, "GGUF tokenizer.ggml.merges[", r, "] = \"", merges[r],
               "\" is not two tokens");
    p.merges.emplace_back(merges[r].substr(0, sp), merges[r].substr(sp + 1));
  }
  p.bos = optional_id(g, "tokenizer.ggml.bos_token_id", n);
  p.eos = optional_id(g, "tokenizer.ggml.eos_token_id", n);
  p.pad = optional_id(g, "tokenizer.ggml.padding_token_id", n);
  // llama.cpp adds bos by default for llama-bpe; the key overrides.
  p.add_bos = family->name == "llama-bpe";
  if (const GgufValue* ab = g.get("tokenizer.ggml.add_bos_token")) p.add_bos = ab->as_bool();
  for (size_t k = 0; k < std::size(kFimKeys); ++k) {
    p.fim_keys.*kFimFields[k] = optional_id(g, kFimKeys[k], n);
  }
  p.eot_key = optional_id(g, "tokenizer.ggml.eot_token_id", n);
  return build(std::move(p));
}

void Tokenizer::write_gguf_metadata(GgufWriter& w) const {
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

}  // namespace efim
