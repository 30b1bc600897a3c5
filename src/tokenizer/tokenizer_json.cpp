// Loading a Hugging Face tokenizer.json (plus tokenizer_config.json / config.json beside it).
// Only what byte-level BPE and SentencePiece-style BPE vocabularies use is accepted; anything
// else is a clear error naming the field, so that a tokenizer we would get wrong is never
// loaded silently.
//
// SentencePiece-style files (model.byte_fallback = true) come in two spellings:
//  - normalizer Replace(" " -> "▁"), with Prepend("▁") when there is a dummy prefix (Llama 2,
//    CodeLlama; Gemma without), no pre-tokenizer (Gemma 3: a Split on " ", which finds nothing
//    once spaces are "▁");
//  - no normalizer, pre-tokenizer Metaspace("▁", prepend_scheme, split) (newer Llama/Mistral).
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "tokenizer/tokenizer_internal.h"

namespace efim {
namespace {

using json = nlohmann::json;

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string()
             ? j["type"].get<std::string>()
             : std::string("?");
}

bool flag(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁"

// What the normalizer and pre-tokenizer of a SentencePiece-style file do with spaces.
struct SpmSpaces {
  bool replace = false;  // normalizer Replace(" " -> "▁")
  bool prepend = false;  // normalizer Prepend("▁")
  bool metaspace = false;
  std::string prepend_scheme;  // Metaspace: always, first, never
};

void read_model(const json& m, const std::string& label, TokenizerParts& p) {
  EFIM_CHECK(m.is_object() && type_of(m) == "BPE", label, ": model.type is \"", type_of(m),
             "\", expected \"BPE\"");
  p.spm.enabled = flag(m, "byte_fallback", false);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    EFIM_CHECK(!m.contains(key) || m[key].is_null() || m[key] == "", label, ": model.", key,
               " = ", m[key].dump(), " is not supported");
  }
  EFIM_CHECK(!m.contains("dropout") || m["dropout"].is_null(), label,
             ": model.dropout is not supported");
  p.ignore_merges = flag(m, "ignore_merges", false);
  EFIM_CHECK(m.contains("vocab") && m["vocab"].is_object(), label, ": model.vocab missing");
  for (const auto& [text, id] : m["vocab"].items()) {
    EFIM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 30),
               label, ": model.vocab[\"", text, "\"] = ", id.dump(), " is not a valid id");
    p.bpe_vocab.emplace(text, id.get<int32_t>());
  }
  EFIM_CHECK(m.contains("merges") && m["merges"].is_array(), label, ": model.merges missing");
  p.merges.reserve(m["merges"].size());
  for (size_t r = 0; r < m["merges"].size(); ++r) {
    const json& e = m["merges"][r];
    if (e.is_string()) {  // "a b"
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ', 1);
      EFIM_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, label,
                 ": model.merges[", r, "] = \"", s, "\" is not two tokens");
      p.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {  // ["a", "b"]
      EFIM_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), label,
                 ": model.merges[", r, "] = ", e.dump(), " is not a pair of strings");
      p.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
}

void read_added(const json& list, const std::string& label, TokenizerParts& p) {
  if (list.is_null()) return;
  EFIM_CHECK(list.is_array(), label, ": added_tokens is not an array");
  for (const json& a : list) {
    EFIM_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                   a.contains("content") && a["content"].is_string(),
               label, ": malformed added token ", a.dump());
    AddedToken t;
    t.id = a["id"].get<int32_t>();
    t.content = a["content"].get<std::string>();
    t.special = flag(a, "special", false);
    t.normalized = flag(a, "normalized", !t.special);
    // Hugging Face would normalize the token itself first ("x" -> "▁x" under Prepend).
    EFIM_CHECK(!(p.spm.enabled && t.normalized), label, ": added token \"", t.content,
               "\" has normalized=true, which SentencePiece-style vocabularies do not support");
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      EFIM_CHECK(!flag(a, key, false), label, ": added token \"", t.content, "\" has ", key,
                 "=true, which is not supported");
    }
    p.added.push_back(std::move(t));
  }
}

void read_pre_step(const json& s, const std::string& label, TokenizerParts& p) {
  const std::string type = type_of(s);
  if (type == "Split") {
    const json& pat = s.contains("pattern") ? s["pattern"] : json();
    EFIM_CHECK(pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string(), label,
               ": pre_tokenizer Split without a Regex pattern: ", s.dump());
    EFIM_CHECK(s.value("behavior", "") == "Isolated" && !flag(s, "invert", false), label,
               ": pre_tokenizer Split behavior ", s.value("behavior", "?"),
               " / invert is not supported (only Isolated)");
    p.steps.push_back(pre_step_from_pattern(pat["Regex"].get<std::string>()));
  } else if (type == "Digits") {
    EFIM_CHECK(flag(s, "individual_digits", false), label,
               ": pre_tokenizer Digits(individual_digits=false) is not supported");
    p.steps.push_back(PreStep::kDigits);
  } else if (type == "ByteLevel") {
    EFIM_CHECK(!flag(s, "add_prefix_space", false), label,
               ": pre_tokenizer ByteLevel add_prefix_space=true is not supported");
    if (flag(s, "use_regex", true)) p.steps.push_back(PreStep::kGpt2);
  } else {
    fail(label, ": unsupported pre_tokenizer type \"", type, "\"");
  }
}

void read_pre_tokenizer(const json& pt, const std::string& label, TokenizerParts& p) {
  EFIM_CHECK(pt.is_object(), label, ": pre_tokenizer missing (byte-level BPE needs ByteLevel)");
  std::vector<json> steps;
  if (type_of(pt) == "Sequence") {
    for (const json& s : pt.value("pretokenizers", json::array())) steps.push_back(s);
  } else {
    steps.push_back(pt);
  }
  EFIM_CHECK(!steps.empty() && type_of(steps.back()) == "ByteLevel", label,
             ": pre_tokenizer must end with ByteLevel, got ", pt.dump().substr(0, 200));
  for (const json& s : steps) read_pre_step(s, label, p);
}

// SentencePiece-style: null, a Metaspace, or a Split on " " after the normalizer turned every
// space into "▁" (nothing left to split on).
void read_spm_pre_tokenizer(const json& pt, const std::string& label, SpmSpaces& sp,
                            TokenizerParts& p) {
  if (pt.is_null()) return;
  const std::string type = type_of(pt);
  if (type == "Metaspace") {
    EFIM_CHECK(pt.value("replacement", "") == kSpace, label, ": Metaspace replacement ",
               pt.value("replacement", "?"), " is not supported (only \"▁\")");
    sp.metaspace = true;
    sp.prepend_scheme = pt.value("prepend_scheme", "");
    if (sp.prepend_scheme.empty()) {  // older files: add_prefix_space
      sp.prepend_scheme = flag(pt, "add_prefix_space", true) ? "always" : "never";
    }
    p.spm.split_words = flag(pt, "split", true);
    return;
  }
  const json pattern = pt.value("pattern", json());
  EFIM_CHECK(type == "Split" && sp.replace && pattern.is_object() &&
                 pattern.value("String", "") == " " && !flag(pt, "invert", false),
             label, ": unsupported pre_tokenizer for a SentencePiece-style vocabulary: ",
             pt.dump().substr(0, 200),
             " (only null, Metaspace, or a Split on \" \" after the normalizer replaced spaces)");
}

void read_normalizer_step(const json& n, const std::string& label, SpmSpaces& sp,
                          TokenizerParts& p) {
  const std::string type = type_of(n);
  if (type == "NFC" && !p.spm.enabled) {
    p.nfc = true;
  } else if (type == "Replace" && p.spm.enabled && n.value("content", "") == kSpace &&
             n.value("pattern", json()).value("String", "") == " ") {
    sp.replace = true;
  } else if (type == "Prepend" && p.spm.enabled && n.value("prepend", "") == kSpace) {
    sp.prepend = true;
  } else {
    fail(label, ": unsupported normalizer ", n.dump().substr(0, 200),
         p.spm.enabled ? " (only Replace(\" \" -> \"▁\") and Prepend(\"▁\"))" : " (only null or NFC)");
  }
}

void read_normalizer(const json& n, const std::string& label, SpmSpaces& sp, TokenizerParts& p) {
  if (n.is_null()) return;
  if (type_of(n) == "Sequence") {
    for (const json& step : n.value("normalizers", json::array()))
      read_normalizer_step(step, label, sp, p);
    return;
  }
  read_normalizer_step(n, label, sp, p);
}

// Where the dummy prefix goes, from what the normalizer and pre-tokenizer said.
void settle_spm_spaces(const SpmSpaces& sp, const std::string& label, TokenizerParts& p) {
  EFIM_CHECK(sp.replace != sp.metaspace, label,
             ": a SentencePiece-style vocabulary needs exactly one of a Replace(\" \" -> \"▁\") "
             "normalizer and a Metaspace pre-tokenizer (replace ", sp.replace, ", metaspace ",
             sp.metaspace, ")");
  EFIM_CHECK(!(sp.prepend && sp.metaspace), label, ": Prepend with Metaspace is not supported");
  if (!sp.metaspace) {
    p.spm.space_prefix = sp.prepend ? SpacePrefix::kEverySegment : SpacePrefix::kNone;
    return;
  }
  if (sp.prepend_scheme == "always") {
    p.spm.space_prefix = SpacePrefix::kMetaspaceAlways;
  } else if (sp.prepend_scheme == "first") {
    p.spm.space_prefix = SpacePrefix::kMetaspaceFirst;
  } else {
    EFIM_CHECK(sp.prepend_scheme == "never", label, ": Metaspace prepend_scheme \"",
               sp.prepend_scheme, "\" is not supported (always, first, never)");
    p.spm.space_prefix = SpacePrefix::kNone;
  }
}

void check_decoder(const json& dec, const std::string& label, bool spm) {
  if (dec.is_null()) return;
  if (!spm) {
    EFIM_CHECK(type_of(dec) == "ByteLevel", label, ": unsupported decoder \"", type_of(dec),
               "\" (only ByteLevel)");
    return;
  }
  // Our decoding is theirs without the one-leading-space Strip (generated text keeps it).
  std::vector<json> steps;
  if (type_of(dec) == "Sequence") {
    for (const json& d : dec.value("decoders", json::array())) steps.push_back(d);
  } else {
    steps.push_back(dec);
  }
  for (const json& d : steps) {
    const std::string t = type_of(d);
    const bool ok = t == "ByteFallback" || t == "Fuse" || t == "Metaspace" ||
                    (t == "Strip" && d.value("content", "") == " ") ||
                    (t == "Replace" && d.value("content", "") == " " &&
                     d.value("pattern", json()).value("String", "") == kSpace);
    EFIM_CHECK(ok, label, ": unsupported decoder step ", d.dump().substr(0, 200),
               " for a SentencePiece-style vocabulary");
  }
}

// TemplateProcessing's single template starting with a special token means "add bos".
void read_post_processor(const json& pp, TokenizerParts& p) {
  if (!pp.is_object()) return;
  if (type_of(pp) == "Sequence") {
    for (const json& q : pp.value("processors", json::array())) read_post_processor(q, p);
    return;
  }
  if (type_of(pp) != "TemplateProcessing" || !pp.contains("single")) return;
  const json& single = pp["single"];
  if (!single.is_array() || single.empty() || !single[0].contains("SpecialToken")) return;
  const std::string name = single[0]["SpecialToken"].value("id", "");
  const json& st = pp.value("special_tokens", json::object());
  if (st.contains(name) && st[name].contains("ids") && !st[name]["ids"].empty()) {
    p.bos = st[name]["ids"][0].get<int32_t>();
    p.add_bos = true;
  }
}

// Fills the id table from model.vocab and added_tokens; ids must be 0..n-1 without holes.
void assemble_vocab(const std::string& label, TokenizerParts& p) {
  int32_t n = 0;
  for (const auto& [text, id] : p.bpe_vocab) n = std::max(n, id + 1);
  for (const auto& a : p.added) n = std::max(n, a.id + 1);
  p.tokens.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (const auto& [text, id] : p.bpe_vocab) {
    p.tokens[id] = text;
    seen[id] = true;
  }
  for (const auto& a : p.added) {
    p.tokens[a.id] = a.content;
    seen[a.id] = true;
  }
  for (int32_t id = 0; id < n; ++id) {
    EFIM_CHECK(seen[id], label, ": no token has id ", id, " (ids must be 0..", n - 1, ")");
  }
  p.types.assign(n, kTokenNormal);
  if (!p.spm.enabled) return;
  for (const auto& [text, id] : p.bpe_vocab)
    if (parse_byte_token(text) >= 0) p.types[id] = kTokenByte;
}

// bos/eos/pad named in tokenizer_config.json (strings or {"content": ...}) or config.json (ids).
void read_sidecars(const std::string& path, TokenizerParts& p) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(path).parent_path();
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < p.tokens.size(); ++i) ids.emplace(p.tokens[i], static_cast<int32_t>(i));
  auto lookup = [&](const json& v) -> int32_t {
    std::string s = v.is_string() ? v.get<std::string>()
                    : v.is_object() && v.contains("content") ? v["content"].get<std::string>()
                                                            : std::string();
    auto it = ids.find(s);
    return it == ids.end() ? -1 : it->second;
  };
  if (fs::exists(dir / "tokenizer_config.json")) {
    const json c = json::parse(read_file((dir / "tokenizer_config.json").string()), nullptr, false);
    if (c.is_object()) {
      if (c.contains("bos_token")) p.bos = lookup(c["bos_token"]);
      if (c.contains("eos_token")) p.eos = lookup(c["eos_token"]);
      if (c.contains("pad_token")) p.pad = lookup(c["pad_token"]);
      if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) {
        p.add_bos = c["add_bos_token"].get<bool>();
      }
    }
  }
  if (fs::exists(dir / "config.json")) {
    const json c = json::parse(read_file((dir / "config.json").string()), nullptr, false);
    auto id_of = [&](const char* key, int32_t& dst) {
      if (dst >= 0 || !c.is_object() || !c.contains(key)) return;
      const json& v = c[key].is_array() && !c[key].empty() ? c[key][0] : c[key];
      if (v.is_number_integer()) dst = v.get<int32_t>();
    };
    id_of("bos_token_id", p.bos);
    id_of("eos_token_id", p.eos);
    id_of("pad_token_id", p.pad);
  }
}

TokenizerParts parse_json(std::string_view text, const std::string& label) {
  const json j = json::parse(text, nullptr, false);
  EFIM_CHECK(!j.is_discarded() && j.is_object(), label, ": not a JSON object");
  TokenizerParts p;
  p.label = label;
  EFIM_CHECK(j.contains("model"), label, ": no \"model\"");
  read_model(j["model"], label, p);
  read_added(j.value("added_tokens", json()), label, p);
  SpmSpaces spaces;
  read_normalizer(j.value("normalizer", json()), label, spaces, p);
  if (p.spm.enabled) {
    read_spm_pre_tokenizer(j.value("pre_tokenizer", json()), label, spaces, p);
    settle_spm_spaces(spaces, label, p);
  } else {
    read_pre_tokenizer(j.value("pre_tokenizer", json()), label, p);
  }
  check_decoder(j.value("decoder", json()), label, p.spm.enabled);
  read_post_processor(j.value("post_processor", json()), p);
  assemble_vocab(label, p);
  const json& m = j["model"];
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = p.bpe_vocab.find(m["unk_token"].get<std::string>());
    if (it != p.bpe_vocab.end()) p.unk = it->second;
  }
  return p;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& label) {
  return build(parse_json(json_text, label));
}

Tokenizer Tokenizer::from_json_file(const std::string& path) {
  TokenizerParts p = parse_json(read_file(path), path);
  read_sidecars(path, p);
  return build(std::move(p));
}

}  // namespace efim
