// FIM sample construction and fragment tokenization (see fim_sample.h).
#include "train/data/fim_sample.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace efim::train {

const char* kind_name(SampleKind kind) {
  switch (kind) {
    case SampleKind::plain: return "plain";
    case SampleKind::fim_short: return "fim-short";
    case SampleKind::fim_span: return "fim-span";
  }
  return "?";
}

std::vector<size_t> char_starts(std::string_view text) {
  std::vector<size_t> starts;
  starts.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size(); ++i)
    if ((static_cast<uint8_t>(text[i]) & 0xC0) != 0x80) starts.push_back(i);  // not a continuation
  starts.push_back(text.size());
  return starts;
}

std::vector<std::string_view> chunk_text(std::string_view text, size_t chunk_chars) {
  EFIM_CHECK(chunk_chars > 0, "chunk_chars must be > 0");
  std::vector<size_t> starts = char_starts(text);
  const size_t n = starts.size() - 1;
  std::vector<std::string_view> chunks;
  for (size_t c = 0; c < n; c += chunk_chars) {
    size_t e = std::min(n, c + chunk_chars);
    chunks.push_back(text.substr(starts[c], starts[e] - starts[c]));
  }
  return chunks;
}

FimLayout draw_layout(size_t n, const FimOptions& opts, Rng& rng) {
  FimLayout l;
  if (!rng.bernoulli(opts.fim_rate)) return l;  // plain
  if (rng.bernoulli(opts.short_hole_share)) {
    l.kind = SampleKind::fim_short;
    double len = 1 + std::floor(rng.exponential(opts.hole_mean_chars));
    size_t hole = static_cast<size_t>(std::min(len, static_cast<double>(n)));
    l.hole_begin = rng.uniform(n - hole + 1);
    l.hole_end = l.hole_begin + hole;
  } else {
    l.kind = SampleKind::fim_span;
    size_t a = rng.uniform(n + 1), b = rng.uniform(n + 1);
    l.hole_begin = std::min(a, b);
    l.hole_end = std::max(a, b);
  }
  return l;
}

uint32_t encode_fragmented(const Tokenizer& tok, std::string_view text, double rate, Rng& rng,
                           std::vector<int32_t>& out) {
  if (text.empty()) return 0;
  auto append = [&](std::string_view piece) {
    std::vector<int32_t> ids = tok.encode(piece);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  if (rate <= 0) {
    append(text);
    return 1;
  }
  uint32_t fragments = 1;
  size_t begin = 0;
  // One Bernoulli draw per boundary between two characters: cut there with probability rate.
  for (size_t i = 1; i < text.size(); ++i) {
    if ((static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) continue;  // inside a character
    if (!rng.bernoulli(rate)) continue;
    append(text.substr(begin, i - begin));
    begin = i;
    ++fragments;
  }
  append(text.substr(begin));
  return fragments;
}

SampleBuilder::SampleBuilder(const Tokenizer& tok, FimOptions opts)
    : tok_(&tok), opts_(opts) {
  auto in01 = [](double v) { return v >= 0 && v <= 1; };
  EFIM_CHECK(opts_.chunk_chars > 0, "chunk_chars must be > 0");
  EFIM_CHECK(in01(opts_.fim_rate), "fim_rate ", opts_.fim_rate, " outside [0, 1]");
  EFIM_CHECK(in01(opts_.short_hole_share), "short_hole_share ", opts_.short_hole_share,
             " outside [0, 1]");
  EFIM_CHECK(in01(opts_.fragment_rate), "fragment_rate ", opts_.fragment_rate,
             " outside [0, 1]");
  EFIM_CHECK(opts_.hole_mean_chars >= 0 && std::isfinite(opts_.hole_mean_chars),
             "hole_mean_chars ", opts_.hole_mean_chars, " must be finite and >= 0");
  const FimTokens& f = tok.fim();
  eos_ = tok.eos();
  prefix_id_ = f.prefix;
  suffix_id_ = f.suffix;
  middle_id_ = f.middle;
  EFIM_CHECK(eos_ >= 0, "the tokenizer has no end-of-text token");
  EFIM_CHECK(prefix_id_ >= 0 && suffix_id_ >= 0 && middle_id_ >= 0,
             "the tokenizer lacks FIM sentinels (prefix ", prefix_id_, ", suffix ", suffix_id_,
             ", middle ", middle_id_, ")");
}

Sample SampleBuilder::make_sample(std::string_view chunk, Rng& layout_rng,
                                  Rng& frag_rng) const {
  std::vector<size_t> starts = char_starts(chunk);
  FimLayout l = draw_layout(starts.size() - 1, opts_, layout_rng);
  Sample s;
  s.kind = l.kind;
  const double rate = opts_.fragment_rate;
  if (l.kind == SampleKind::plain) {
    s.middle = chunk;
    s.fragments = encode_fragmented(*tok_, chunk, rate, frag_rng, s.tokens);
  } else {
    const size_t a = starts[l.hole_begin], b = starts[l.hole_end];
    s.prefix = chunk.substr(0, a);
    s.middle = chunk.substr(a, b - a);
    s.suffix = chunk.substr(b);
    s.tokens.push_back(prefix_id_);
    s.fragments += encode_fragmented(*tok_, s.prefix, rate, frag_rng, s.tokens);
    s.tokens.push_back(suffix_id_);
    s.fragments += encode_fragmented(*tok_, s.suffix, rate, frag_rng, s.tokens);
    s.tokens.push_back(middle_id_);
    s.fragments += encode_fragmented(*tok_, s.middle, rate, frag_rng, s.tokens);
  }
  s.tokens.push_back(eos_);
  return s;
}

std::vector<Sample> SampleBuilder::document(std::string_view text,
                                            std::string_view label) const {
  EFIM_CHECK(unicode::is_valid_utf8(text), "document '", label, "' is not valid UTF-8");
  const uint64_t key = fnv1a64(label.data(), label.size());
  // Two independent streams: layouts do not depend on the fragment rate.
  Rng layout_rng(stream_seed(opts_.seed, key));
  Rng frag_rng(stream_seed(opts_.seed ^ 0x6672616773ULL, key));  // "frags"
  std::vector<Sample> out;
  for (std::string_view chunk : chunk_text(text, opts_.chunk_chars))
    out.push_back(make_sample(chunk, layout_rng, frag_rng));
  return out;
}

}  // namespace efim::train
