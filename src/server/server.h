// HTTP front of efim: OpenAI /v1/completions, llama.cpp-compatible /infill, /health,
// /v1/models and Prometheus /metrics over cpp-httplib. Handler threads parse and validate
// JSON, plan prompts and read RequestStreams; only the Engine's own thread touches the model
// (architecture rule 1).
// Errors: 400 invalid input, 401 API key, 404 unknown model (code model_not_found), 503 more
// than max_concurrent_requests generation requests in flight (code overloaded, Retry-After) or
// a draining server (code draining, Retry-After).
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "infill/healing.h"
#include "infill/planner.h"
#include "tokenizer/tokenizer.h"

namespace efim {

// What /props and Ollama's /api/tags, /api/show and /api/ps say about the served model.
struct ModelCard {
  std::string format = "gguf";  // or "safetensors" (a Hugging Face folder)
  std::string family;           // the architecture: llama, qwen2, qwen3, starcoder2, gemma, ...
  int64_t n_params = 0;         // elements of all tensors
  std::string quantization;     // llama.cpp's file type name: Q8_0, Q4_K_M, F16, BF16, ...
  int64_t file_bytes = 0;
  int64_t modified_unix = 0;    // the file's mtime, seconds
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8012;                     // 0: any free port (see Server::bind)
  std::string api_key;                 // empty: no authentication
  std::string model_id = "efim";       // reported by /v1/models and in responses
  std::string model_path;              // reported by /props (and Ollama's /api/show)
  ModelCard card = {};
  InfillMode infill_mode = InfillMode::automatic;
  PlannerOptions planner = {};
  // Token healing (infill/healing.h): the mode (efim serve --token-healing) and whether the
  // model declares fragment-tokenized training (auto then leaves its EFIM plans alone).
  HealPolicy healing = {};
  size_t max_body_bytes = 16u << 20;  // larger request bodies get 413
  int write_timeout_s = 10;  // a client that reads nothing this long is dropped
  int read_timeout_s = 10;   // a request must arrive whole within this of its first byte
  int idle_timeout_s = 5;    // a keep-alive connection idle this long is closed
  int max_connections = 1024;  // open connections at most; one more gets 503
  size_t max_buffered_bytes = size_t(256) << 20;  // request bytes held at once; past it 503
  // Generation requests (completions, infill) in flight at most; one more answers 503.
  int max_concurrent_requests = 64;
  // Prompt tokens of the generation requests in flight at most (0: no cap). A request whose
  // prompt does not fit beside them answers 503, one over the cap by itself 413.
  int64_t max_tokens_in_flight = 0;
};

class Server {
 public:
  // `engine` and `tokenizer` are borrowed and must outlive the server; n_ctx is the model's
  // context length in tokens. Without FIM sentinels in the vocabulary, infill requests
  // answer 400 and the other routes work.
  Server(Engine& engine, const Tokenizer& tokenizer, int32_t n_ctx, const ServerOptions& opts);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one when options.port is 0).
  // Throws Error when the address cannot be bound.
  int bind();
  // Serves until stop(); call after bind().
  void listen();
  // Any thread: makes listen() return.
  void stop();
  // Any thread: graceful drain before stop(). /health answers 503 {"status":"draining"} (a load
  // balancer's health check moves traffic away) and new generation requests answer 503 (code
  // draining, Retry-After: 1: a balancer retries them on another replica); requests in flight
  // go on, and the other routes (/metrics) still answer.
  void drain();
  bool draining() const;
  // Generation requests in flight (holding an admission slot): drained when 0.
  int in_flight() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace efim
