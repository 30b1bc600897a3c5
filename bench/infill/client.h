// One streamed /v1/completions request, timed the way vLLM's benchmark_serving times it:
// TTFT = start to the first SSE chunk with non-empty text, latency = start to the end of the
// stream, TPOT = (latency - TTFT) / (completion tokens - 1); token counts and cached prompt
// tokens come from the last chunk's `usage`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace efim::bench {

struct RequestTiming {
  double ttft_s = 0, latency_s = 0;
  double start_s = 0;  // since the scheme started
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::vector<double> chunk_s;           // arrival of each text chunk, since the request started
  std::string text;                      // the completion
  std::optional<double> tpot_s() const;  // nullopt with fewer than 2 completion tokens
};

// Splits an SSE byte stream into `data:` payloads as they complete (chunks may split events
// anywhere). Lines other than `data:` (comments, event:, id:) are ignored.
class SseParser {
 public:
  // Returns the payloads completed by this piece of the stream.
  std::vector<std::string> push(std::string_view bytes);

 private:
  std::string pending_;  // bytes of an unfinished line
};

struct ClientOptions {
  std::string url;  // "http://host:port"
  std::string api_key;
  double timeout_s = 600;
};

// Sends `body` (stream must be true) to POST /v1/completions and reads the stream to [DONE].
// Throws Error on a transport failure, an HTTP status other than 200, an `error` in the stream
// or a stream without usage.
RequestTiming run_request(const ClientOptions& opts, const nlohmann::json& body);

// GET url/metrics; nullopt when the server has no such route (404) or is unreachable.
std::optional<std::string> fetch_metrics(const ClientOptions& opts);

}  // namespace efim::bench
