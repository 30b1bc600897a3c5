#include "infill/stop.h"

#include <algorithm>

namespace efim {

namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

size_t non_blank_bytes(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return !is_blank(c); }));
}

// The line of `text` starting at `pos`, without its '\n'; `next` = the start of the next line
// (text.size() + 1 when this is the last, unterminated line).
std::string_view line_at(std::string_view text, size_t pos, size_t& next) {
  const size_t eol = text.find('\n', pos);
  if (eol == std::string_view::npos) {
    next = text.size() + 1;
    return text.substr(pos);
  }
  next = eol + 1;
  return text.substr(pos, eol - pos);
}

}  // namespace

std::vector<int32_t> infill_stop_tokens(const Tokenizer& tok, const FimFormat& fmt,
                                        std::span<const int32_t> extra_ids) {
  const FimTokens& f = tok.fim();
  // end_of_generation() holds eos and eot.
  std::vector<int32_t> ids = tok.end_of_generation();
  ids.insert(ids.end(), {f.pad, f.repo_name, f.file_sep, fmt.pre, fmt.suf, fmt.mid});
  ids.insert(ids.end(), extra_ids.begin(), extra_ids.end());
  std::erase_if(ids, [&](int32_t id) { return id < 0 || id >= tok.vocab_size(); });
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

bool cursor_at_line_start(std::string_view prefix) {
  return prefix.empty() || prefix.back() == '\n';
}

SuffixRepeatGuard::SuffixRepeatGuard(std::string_view suffix, RepeatRuleOptions opts)
    : opts_(opts) {
  size_t pos = 0;
  if (!opts_.cursor_at_line_start) {
    const size_t nl = suffix.find('\n');
    if (nl == std::string_view::npos) return;  // no full line after the cursor
    pos = nl + 1;
  }
  size_t next = 0;
  while (pos < suffix.size() && rstrip(line_at(suffix, pos, next)).empty()) pos = next;
  if (pos >= suffix.size()) return;
  gap_ = std::string(suffix.substr(0, pos));
  size_t chars = 0;
  while (pos < suffix.size() && needle_.size() < opts_.max_lines && chars < opts_.min_chars) {
    const std::string_view line = rstrip(line_at(suffix, pos, next));
    needle_.emplace_back(line);
    chars += non_blank_bytes(line);
    pos = next;
  }
  if (chars < opts_.min_chars) needle_.clear();  // too short to tell a repeat from intent
}

size_t SuffixRepeatGuard::gap_overlap(size_t line_start) const {
  for (size_t k = std::min(line_start, gap_.size()); k > 0; --k) {
    if (std::string_view(text_).substr(line_start - k, k) ==
        std::string_view(gap_).substr(gap_.size() - k)) {
      return k;
    }
  }
  return 0;
}

SuffixRepeatGuard::Scan SuffixRepeatGuard::scan(bool final) const {
  const std::string_view text = text_;
  Scan s;
  s.hold = text.size();
  // 0: cannot match at L; 1: may still match; 2: matches.
  auto match_at = [&](size_t pos) {
    for (size_t k = 0; k < needle_.size(); ++k) {
      if (pos >= text.size()) return final ? 0 : 1;
      size_t next = 0;
      const std::string_view line = line_at(text, pos, next);
      const std::string_view body = rstrip(line);
      if (next > text.size()) {  // unterminated last line
        if (final) return k + 1 == needle_.size() && body == needle_[k] ? 2 : 0;
        return std::string_view(needle_[k]).starts_with(body) ? 1 : 0;
      }
      if (body != needle_[k]) return 0;
      pos = next;
    }
    return 2;
  };
  bool held = false;
  auto visit = [&](size_t line_start) {
    const int m = match_at(line_start);
    if (m == 2) s.cut = std::max(line_start - gap_overlap(line_start), emitted_);
    if (m == 1 && !held) {
      s.hold = line_start - gap_overlap(line_start);
      held = true;
    }
    return m == 2;
  };
  if (emitted_ == 0 && opts_.cursor_at_line_start && visit(0)) return s;
  for (size_t i = emitted_ > 0 ? emitted_ - 1 : 0; i < text.size(); ++i) {
    if (text[i] == '\n' && visit(i + 1)) return s;
  }
  // A line start yet to come could take a tail of the text with it as gap overlap: hold the
  // longest tail that occurs in the gap.
  for (size_t k = std::min(text.size(), gap_.size()); k > 0; --k) {
    if (gap_.find(text.substr(text.size() - k)) != std::string::npos) {
      s.hold = std::min(s.hold, text.size() - k);
      break;
    }
  }
  s.hold = std::max(s.hold, emitted_);
  return s;
}

SuffixRepeatGuard::Step SuffixRepeatGuard::push(std::string_view piece) {
  Step step;
  if (stopped_) {
    step.stop = true;
    return step;
  }
  text_ += piece;
  if (needle_.empty()) {
    step.text = text_.substr(emitted_);
    emitted_ = text_.size();
    return step;
  }
  const Scan s = scan(false);
  const size_t end = s.cut != std::string::npos ? s.cut : s.hold;
  step.text = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  if (s.cut != std::string::npos) {
    stopped_ = true;
    step.stop = true;
  }
  return step;
}

std::string SuffixRepeatGuard::finish() {
  if (stopped_) return "";
  stopped_ = true;
  size_t end = text_.size();
  if (!needle_.empty()) {
    const Scan s = scan(true);
    if (s.cut != std::string::npos) end = s.cut;
  }
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string trim_suffix_repeat(std::string_view completion, std::string_view suffix,
                               const RepeatRuleOptions& opts) {
  SuffixRepeatGuard guard(suffix, opts);
  SuffixRepeatGuard::Step step = guard.push(completion);
  if (step.stop) return step.text;
  return step.text + guard.finish();
}

IndentLimit::Step IndentLimit::push(std::string_view piece) {
  Step out;
  if (stopped_) return out;
  for (size_t i = 0; i < piece.size(); ++i) {
    const char c = piece[i];
    if (c == '\n') {
      at_line_start_ = true;
      indent_ = 0;
    } else if (at_line_start_ && (c == ' ' || c == '\t')) {
      ++indent_;
    } else if (at_line_start_ && c != '\r') {
      at_line_start_ = false;
      if (n_indent_ > 0 && indent_ < n_indent_) {
        out.text = std::string(piece.substr(0, i));
        out.stop = stopped_ = true;
        return out;
      }
    }
  }
  out.text = std::string(piece);
  return out;
}

}  // namespace efim
