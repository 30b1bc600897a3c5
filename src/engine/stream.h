// RequestStream: the channel from the engine thread to one request's reader. The engine thread
// pushes tokens and finally the result; any other thread reads. The lock lives here, in the
// channel, never in model or cache code (architecture rule 1).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace efim {

// What one RequestStream::next() returns: the tokens produced since the previous call and the
// text they completed (whole UTF-8 characters only; empty without a tokenizer).
struct StreamChunk {
  std::vector<int32_t> tokens;
  std::string text;
  bool empty() const { return tokens.empty() && text.empty(); }
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // Reader side. Blocks until new tokens or text arrive or the request ends; returns what was
  // produced since the last call, in order. Empty: the request has ended and all was read.
  StreamChunk next();
  // Blocks until the request ends; returns its result (the full token list included).
  RequestResult wait();
  bool done() const;

  // Engine side.
  void push(int32_t token, std::string_view text);
  void push_text(std::string_view text);  // text without a token (the decoder's final flush)
  void finish(RequestResult result);

 private:
  const RequestId id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  StreamChunk pending_;                  // pushed, not yet read by next()
  std::optional<RequestResult> result_;  // set once, at the end
};

}  // namespace efim
