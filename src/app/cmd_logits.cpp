// `efim logits MODEL --tokens "1 2 3" --out F [--all]`: raw float32 logits of one prompt, for
// parity checks against other implementations (same interface as peers/llama_cpp's llama_ref).
#include <cstdio>
#include <fstream>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"

namespace efim::app {
namespace {

struct LogitsArgs {
  std::string model, tokens, out;
  bool all = false;
  int threads = 0;
  std::string kv_type = "f32";
};

void run_logits(const LogitsArgs& a) {
  LoadOptions lo;
  lo.n_threads = a.threads;
  auto model = Model::load(a.model, lo);
  std::vector<int32_t> ids = parse_token_ids(a.tokens, static_cast<int32_t>(model->config().vocab));
  EFIM_CHECK(!ids.empty(), "--tokens is empty");
  ContiguousSession session(*model, static_cast<int64_t>(ids.size()), parse_kv_type(a.kv_type));
  std::vector<float> logits = session.eval(ids, a.all);  // [rows, vocab]
  std::ofstream out(a.out, std::ios::binary);
  EFIM_CHECK(out, "cannot create '", a.out, "'");
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  EFIM_CHECK(out.good(), "error writing '", a.out, "'");
  std::printf("{\"n_tokens\":%zu,\"rows\":%zu,\"n_vocab\":%lld,\"out\":\"%s\"}\n", ids.size(),
              logits.size() / static_cast<size_t>(model->config().vocab),
              static_cast<long long>(model->config().vocab), a.out.c_str());
}

}  // namespace

void register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  auto* cmd = app.add_subcommand("logits", "Write the logits of a prompt as raw float32");
  cmd->add_option("model", a->model, "HF folder or .gguf file")->required();
  cmd->add_option("--tokens", a->tokens, "Prompt token ids (\"1 2 3\")")->required();
  cmd->add_option("--out", a->out, "Output file: float32 [rows, vocab]")->required();
  cmd->add_flag("--all", a->all, "Every position (default: the last only)");
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)");
  cmd->add_option("--kv-type", a->kv_type,
                  "K/V cache element type: f32 (exact, for parity checks), f16 or q8_0")
      ->capture_default_str();
  cmd->callback([a] { run_logits(*a); });
}

}  // namespace efim::app
