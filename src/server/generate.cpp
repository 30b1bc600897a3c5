// The generation driver shared by the routes: stream -> filters -> client, with cancellation.
#include <algorithm>
#include <chrono>
#include <optional>

#include "base/error.h"
#include "server/server_impl.h"

namespace efim {

TextFilter::TextFilter(std::optional<std::string_view> infill_suffix,
                       std::vector<std::string> stops, int64_t n_indent) {
  if (infill_suffix) guard_.emplace(*infill_suffix);
  if (n_indent > 0) indent_.emplace(n_indent);
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) hold_ = std::max(hold_, s.size() - 1);
}

TextFilter::Step TextFilter::cut_stops(std::string piece) {
  held_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < cut) {
      cut = at;
      stopping_word_ = s;
    }
  }
  Step out;
  if (cut != std::string::npos) {
    cut_ = TextCut::stop_string;
    out.text = held_.substr(0, cut);
    out.stop = true;
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Keep the tail a stop string could still start in; never split a UTF-8 character.
  size_t safe = held_.size() > hold_ ? held_.size() - hold_ : 0;
  while (safe > 0 && safe < held_.size() && (uint8_t(held_[safe]) & 0xC0) == 0x80) --safe;
  out.text = held_.substr(0, safe);
  held_.erase(0, safe);
  return out;
}

// The guard and the indentation limit may cut the text; stop strings then see the cut text.
TextFilter::Step TextFilter::push(std::string_view piece) {
  if (stopped_) return {};
  std::string text(piece);
  bool cut = false;
  if (guard_) {
    SuffixRepeatGuard::Step g = guard_->push(text);
    text = std::move(g.text);
    cut = g.stop;
    if (cut) cut_ = TextCut::suffix_repeat;
  }
  if (indent_) {
    IndentLimit::Step i = indent_->push(text);
    text = std::move(i.text);
    if (i.stop && !cut) cut_ = TextCut::indent;
    cut = cut || i.stop;
  }
  Step out = cut_stops(std::move(text));  // a stop string found here comes before any cut
  if (cut && !out.stop) {
    out.text += held_;  // the text was cut; no stop string can complete any more
    held_.clear();
    out.stop = stopped_ = true;
  }
  return out;
}

std::string TextFilter::finish() {
  if (stopped_) return {};
  std::string tail = guard_ ? guard_->finish() : std::string();
  if (indent_) tail = indent_->push(tail).text;
  Step s = cut_stops(std::move(tail));
  if (!s.stop) s.text += held_;
  held_.clear();
  stopped_ = true;
  return s.text;
}

DriveOutcome drive(Engine& engine, RequestStream& stream, TextFilter& filter,
                   const DriveOptions& opts) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> first;  // the first token's arrival (the prompt is done)
  DriveOutcome o;
  for (;;) {
    StreamChunk c = stream.next();
    if (c.empty()) break;
    if (!first && !c.tokens.empty()) first = Clock::now();
    TextFilter::Step s = filter.push(c.text);
    if (!s.text.empty() && !opts.emit(s.text)) {
      o.client_gone = true;
      break;
    }
    if (s.stop) {
      o.text_stop = true;
      break;
    }
    // llama.cpp's t_max_predict_ms: generation time counts from the first token, and the
    // limit ends the text only at a generated newline (the token that carries it included;
    // text the filters still hold goes out at the end).
    if (opts.time_limit_ms > 0 && first && c.text.find('\n') != std::string::npos) {
      const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - *first);
      if (ms.count() > double(opts.time_limit_ms)) {
        o.time_stop = true;
        break;
      }
    }
  }
  // A no-op when the request already ended on its own. A stop string ends it as a stop and a
  // time limit as length, so the engine's metrics count them as the client sees them.
  if (o.client_gone) engine.cancel(stream.id());
  if (o.text_stop) engine.cancel(stream.id(), FinishReason::stop);
  if (o.time_stop) engine.cancel(stream.id(), FinishReason::length);
  o.result = stream.wait();
  if (!o.client_gone) {
    std::string tail = filter.finish();
    if (!tail.empty() && !opts.emit(tail)) o.client_gone = true;
  }
  o.cut = filter.cut();
  o.stopping_word = o.cut == TextCut::stop_string ? filter.stopping_word() : std::string();
  return o;
}

HealBackoff heal_prompt(const Server::Impl& s, Request& r, size_t from) {
  const VocabIndex* index = s.engine.vocab_index();
  EFIM_CHECK(index, "token healing needs the engine's tokenizer");
  return heal_request(*index, r, std::max<size_t>(from, 1), s.opt.healing.exact);
}

std::optional<bool> parse_token_healing(const http::json& body) {
  return http::get_bool(body, "token_healing");
}

http::json healing_json(const HealBackoff& h) {
  return {{"tokens_removed", h.n_tokens}, {"bytes_removed", h.bytes.size()}};
}

const char* finish_reason(const DriveOutcome& o) {
  if (o.text_stop) return "stop";
  if (o.time_stop) return "length";
  return o.result.finish == FinishReason::stop ? "stop" : "length";
}

}  // namespace efim
