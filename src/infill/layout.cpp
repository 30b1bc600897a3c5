#include "infill/layout.h"

#include <algorithm>
#include <array>

#include "base/error.h"

namespace efim {

namespace {

constexpr std::array<std::string_view, 5> kFamilyNames = {"starcoder", "qwen", "deepseek",
                                                          "deepseek_swapped", "codellama"};

bool is_utf8_continuation(char c) {
  return (static_cast<uint8_t>(c) & 0xC0) == 0x80;
}

void append(std::vector<int32_t>& out, std::span<const int32_t> ids) {
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace

std::string_view family_name(FimFamily f) {
  return kFamilyNames.at(static_cast<size_t>(f));
}

std::string_view order_name(FimOrder o) {
  switch (o) {
    case FimOrder::psm:
      return "psm";
    case FimOrder::spm:
      return "spm";
    case FimOrder::efim:
      return "efim";
  }
  return "?";
}

std::string_view part_name(PromptPart p) {
  static constexpr std::array<std::string_view, 7> names = {"bos",    "extra", "sentinel", "prefix",
                                                            "suffix", "inc",   "prompt"};
  return names.at(static_cast<size_t>(p));
}

FimFamily parse_family(std::string_view name) {
  for (size_t i = 0; i < kFamilyNames.size(); ++i) {
    if (kFamilyNames[i] == name) return static_cast<FimFamily>(i);
  }
  fail("unknown FIM family \"", name,
       "\" (expected starcoder, qwen, deepseek, deepseek_swapped or codellama)");
}

std::string FimFormat::id() const {
  return str(family_name(family), "/bos=", bos, "/", pre, ",", suf, ",", mid, "/repo=", repo_name,
             ",", file_sep, "/space=", prefix_space,
             "/spm=", spm == SpmStyle::joint ? "joint" : "plain");
}

FimFamily detect_family(const Tokenizer& tok) {
  const FimTokens& f = tok.fim();
  EFIM_CHECK(f.prefix >= 0 && f.suffix >= 0 && f.middle >= 0,
             "infill: the vocabulary has no FIM sentinels (prefix ", f.prefix, ", suffix ",
             f.suffix, ", middle ", f.middle, "); this model cannot infill");
  const std::string_view pre = tok.token_text(f.prefix);
  if (pre == "<|fim_prefix|>") return FimFamily::qwen;
  if (pre == "<｜fim▁begin｜>") return FimFamily::deepseek;
  if (pre.find("<PRE>") != std::string_view::npos) return FimFamily::codellama;
  return FimFamily::starcoder;  // <fim_prefix> and any other spelling: the generic layout
}

FimFormat make_format(const Tokenizer& tok, const FormatOptions& opts) {
  const FimFamily detected = detect_family(tok);  // also checks the sentinels exist
  const FimTokens& f = tok.fim();
  FimFormat fmt;
  fmt.family = opts.family.value_or(detected);
  fmt.bos = opts.add_bos.value_or(tok.add_bos_default()) ? tok.bos() : -1;
  fmt.pre = f.prefix;
  fmt.suf = f.suffix;
  fmt.mid = f.middle;
  if (fmt.family == FimFamily::deepseek_swapped) std::swap(fmt.suf, fmt.mid);
  fmt.repo_name = f.repo_name;
  fmt.file_sep = f.file_sep;
  fmt.prefix_space = fmt.family == FimFamily::codellama;
  const bool joint = fmt.family == FimFamily::starcoder || fmt.family == FimFamily::codellama;
  fmt.spm = opts.spm.value_or(joint ? SpmStyle::joint : SpmStyle::plain);
  return fmt;
}

size_t FimPrompt::count(PromptPart p) const {
  size_t n = 0;
  for (const PartRange& r : ranges) {
    if (r.part == p) n += r.end - r.begin;
  }
  return n;
}

std::span<const int32_t> FimPrompt::first(PromptPart p) const {
  for (const PartRange& r : ranges) {
    if (r.part == p) return std::span<const int32_t>(tokens).subspan(r.begin, r.end - r.begin);
  }
  return {};
}

// The tokenized parts of one prompt, with what the budget keeps of each.
struct FimLayout::Pieces {
  std::vector<std::vector<int32_t>> chunks;  // [chunk] header + text tokens of each extra chunk
  std::vector<int32_t> extra_head;           // <|repo_name|>repo\n (with repo sentinels)
  std::vector<int32_t> extra_tail;           // <|file_sep|>current\n (with repo sentinels)
  size_t first_chunk = 0;                    // chunks kept: [first_chunk, chunks.size())
  std::vector<int32_t> prefix, suffix, inc, prompt;
  size_t prefix_begin = 0;  // prefix kept: [prefix_begin, prefix.size())
  size_t suffix_end = 0;    // suffix kept: [0, suffix_end)
  bool truncated = false;

  size_t extra_size() const {
    if (first_chunk == chunks.size()) return 0;
    size_t n = extra_head.size() + extra_tail.size();
    for (size_t c = first_chunk; c < chunks.size(); ++c) n += chunks[c].size();
    return n;
  }
};

FimLayout::FimLayout(const Tokenizer& tok, FimFormat format, LayoutOptions opts)
    : tok_(&tok), fmt_(std::move(format)), opts_(std::move(opts)) {
  const int32_t n = tok.vocab_size();
  for (int32_t id : {fmt_.pre, fmt_.suf, fmt_.mid}) {
    EFIM_CHECK(id >= 0 && id < n, "infill: FIM sentinel id ", id, " out of range [0, ", n,
               ") in format ", fmt_.id());
  }
  EFIM_CHECK(opts_.prefix_share > 0.0 && opts_.prefix_share <= 1.0, "infill: prefix_share ",
             opts_.prefix_share, " outside (0, 1]");
  EFIM_CHECK(opts_.extra_share >= 0.0 && opts_.extra_share <= 1.0, "infill: extra_share ",
             opts_.extra_share, " outside [0, 1]");
}

// No SentencePiece dummy prefix: the parts continue each other (the suffix continues the hole,
// typed text continues the prefix), and encode_prefix() places the space a format wants.
std::vector<int32_t> FimLayout::encode(std::string_view text) const {
  return tok_->encode(text, {.parse_special = false, .add_bos = false, .space_prefix = false});
}

std::vector<int32_t> FimLayout::encode_prefix(std::string_view text) const {
  if (!fmt_.prefix_space || text.empty()) return encode(text);
  return encode(str(" ", text));
}

// Each chunk is tokenized piecewise (header, then text) so that its tokens never depend on the
// neighbouring chunks: dropping a chunk leaves the others' tokens unchanged.
std::vector<std::vector<int32_t>> FimLayout::encode_extra(const FimParts& parts) const {
  std::vector<std::vector<int32_t>> chunks;
  for (const ExtraChunk& c : parts.extra) {
    std::vector<int32_t> ids;
    if (fmt_.file_sep >= 0) {
      ids.push_back(fmt_.file_sep);
      append(ids, encode(str(c.filename, "\n")));
    } else {
      append(ids, encode(str("--- ", c.filename, " ---\n")));
    }
    const bool newline = !c.text.empty() && c.text.back() == '\n';
    append(ids, encode(newline ? c.text : str(c.text, "\n")));
    chunks.push_back(std::move(ids));
  }
  return chunks;
}

namespace {

// Start index for keeping the last `keep` tokens of `ids`: moved forward to a line start when
// one is within keep/4 tokens, and never onto a token that starts inside a UTF-8 character.
size_t head_cut(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t keep) {
  const size_t n = ids.size();
  const size_t start = n - std::min(keep, n);
  if (start == 0) return 0;
  for (size_t i = start; i < n && i <= start + keep / 4; ++i) {
    if (tok.token_bytes(ids[i - 1]).find('\n') != std::string_view::npos) return i;
  }
  size_t i = start;
  while (i < n && !tok.token_bytes(ids[i]).empty() &&
         is_utf8_continuation(tok.token_bytes(ids[i])[0]))
    ++i;
  return i;
}

// End index for keeping the first `keep` tokens: moved back to just after a token holding a
// newline when one is within keep/4 tokens, and never inside a UTF-8 character.
size_t tail_cut(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t keep) {
  const size_t n = ids.size();
  const size_t end = std::min(keep, n);
  if (end == n) return n;
  for (size_t i = end; i > 0 && i + keep / 4 >= end; --i) {
    if (tok.token_bytes(ids[i - 1]).find('\n') != std::string_view::npos) return i;
  }
  size_t i = end;
  while (i > 0 && !tok.token_bytes(ids[i]).empty() &&
         is_utf8_continuation(tok.token_bytes(ids[i])[0]))
    --i;
  return i;
}

}  // namespace

void FimLayout::fit(Pieces& pc, size_t max_tokens, FimOrder order) const {
  pc.prefix_begin = 0;
  pc.suffix_end = pc.suffix.size();
  if (max_tokens == 0) return;
  const size_t fixed = (fmt_.bos >= 0 ? 1 : 0) + 3 + pc.inc.size() + pc.prompt.size();
  EFIM_CHECK(fixed <= max_tokens, "infill: the prompt needs at least ", fixed,
             " tokens (sentinels ", 3 + (fmt_.bos >= 0 ? 1 : 0), ", inc ", pc.inc.size(),
             ", prompt ", pc.prompt.size(), ") but the prompt budget is ", max_tokens, " (order ",
             order_name(order), ")");
  const size_t avail = max_tokens - fixed;  // for extra, prefix and suffix
  const size_t ps = pc.prefix.size() + pc.suffix.size();
  const auto extra_cap = static_cast<size_t>(static_cast<double>(max_tokens) * opts_.extra_share);
  while (pc.first_chunk < pc.chunks.size() && pc.extra_size() > std::min(extra_cap, avail)) {
    ++pc.first_chunk;
    pc.truncated = true;
  }
  if (ps <= avail - pc.extra_size()) return;
  const size_t left = avail - pc.extra_size();  // for p and s
  const auto prefix_cap = static_cast<size_t>(static_cast<double>(left) * opts_.prefix_share);
  const size_t prefix_keep =
      std::min(pc.prefix.size(), std::max(prefix_cap, left - std::min(left, pc.suffix.size())));
  const size_t suffix_keep = std::min(pc.suffix.size(), left - prefix_keep);
  pc.prefix_begin = head_cut(*tok_, pc.prefix, prefix_keep);
  pc.suffix_end = tail_cut(*tok_, pc.suffix, suffix_keep);
  pc.truncated = true;
}

FimPrompt FimLayout::build(const FimParts& parts, FimOrder order, size_t max_tokens) const {
  EFIM_CHECK(order == FimOrder::efim || parts.inc.empty(), "infill: inc (", parts.inc.size(),
             " bytes) is only meaningful in EFIM order, not ", order_name(order));
  Pieces pc;
  pc.chunks = encode_extra(parts);
  if (fmt_.file_sep >= 0) {
    if (fmt_.repo_name >= 0) {
      pc.extra_head.push_back(fmt_.repo_name);
      append(pc.extra_head, encode(str(opts_.repo_name, "\n")));
    }
    pc.extra_tail.push_back(fmt_.file_sep);
    const std::string_view name = parts.filename.empty() ? opts_.default_filename : parts.filename;
    append(pc.extra_tail, encode(str(name, "\n")));
  }
  pc.prefix = encode_prefix(parts.prefix);
  pc.suffix = encode(parts.suffix);
  pc.inc = encode(parts.inc);
  pc.prompt = encode(parts.prompt);
  fit(pc, max_tokens, order);
  return assemble(pc, order);
}

FimPrompt FimLayout::assemble(const Pieces& pc, FimOrder order) const {
  FimPrompt out;
  out.order = order;
  out.truncated = pc.truncated;
  out.extra_chunks = pc.chunks.size() - pc.first_chunk;
  auto add = [&](PromptPart part, std::span<const int32_t> ids) {
    if (ids.empty()) return;
    const auto begin = static_cast<uint32_t>(out.tokens.size());
    append(out.tokens, ids);
    const auto end = static_cast<uint32_t>(out.tokens.size());
    if (!out.ranges.empty() && out.ranges.back().part == part && part != PromptPart::sentinel) {
      out.ranges.back().end = end;
    } else {
      out.ranges.push_back({part, begin, end});
    }
  };
  auto sentinel = [&](int32_t id) { add(PromptPart::sentinel, std::span<const int32_t>(&id, 1)); };
  const std::span<const int32_t> prefix =
      std::span<const int32_t>(pc.prefix).subspan(pc.prefix_begin);
  const std::span<const int32_t> suffix = std::span<const int32_t>(pc.suffix).first(pc.suffix_end);

  if (fmt_.bos >= 0) add(PromptPart::bos, std::span<const int32_t>(&fmt_.bos, 1));
  if (out.extra_chunks > 0) {
    add(PromptPart::extra, pc.extra_head);
    for (size_t c = pc.first_chunk; c < pc.chunks.size(); ++c) add(PromptPart::extra, pc.chunks[c]);
    add(PromptPart::extra, pc.extra_tail);
  }
  if (order == FimOrder::spm && fmt_.spm == SpmStyle::joint) {
    sentinel(fmt_.pre);
    sentinel(fmt_.suf);
    add(PromptPart::suffix, suffix);
    sentinel(fmt_.mid);
    out.middle_end = out.tokens.size();
    add(PromptPart::prefix, prefix);
  } else if (order == FimOrder::spm) {
    sentinel(fmt_.suf);
    add(PromptPart::suffix, suffix);
    sentinel(fmt_.pre);
    add(PromptPart::prefix, prefix);
    sentinel(fmt_.mid);
    out.middle_end = out.tokens.size();
  } else {  // PSM, and EFIM with inc after the middle sentinel
    sentinel(fmt_.pre);
    add(PromptPart::prefix, prefix);
    sentinel(fmt_.suf);
    add(PromptPart::suffix, suffix);
    sentinel(fmt_.mid);
    out.middle_end = out.tokens.size();
    add(PromptPart::inc, pc.inc);
  }
  add(PromptPart::prompt, pc.prompt);
  return out;
}

}  // namespace efim
