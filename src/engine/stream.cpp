#include "engine/stream.h"

namespace efim {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

StreamChunk RequestStream::next() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !pending_.empty() || result_.has_value(); });
  StreamChunk out;
  std::swap(out, pending_);
  return out;
}

RequestResult RequestStream::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return result_.has_value(); });
  return *result_;
}

bool RequestStream::done() const {
  std::lock_guard lk(mu_);
  return result_.has_value();
}

void RequestStream::push(int32_t token, std::string_view text) {
  {
    std::lock_guard lk(mu_);
    pending_.tokens.push_back(token);
    pending_.text += text;
  }
  cv_.notify_all();
}

void RequestStream::push_text(std::string_view text) {
  if (text.empty()) return;
  {
    std::lock_guard lk(mu_);
    pending_.text += text;
  }
  cv_.notify_all();
}

void RequestStream::finish(RequestResult result) {
  {
    std::lock_guard lk(mu_);
    result_ = std::move(result);
  }
  cv_.notify_all();
}

}  // namespace efim
