// `efim generate MODEL PROMPT`: streams a continuation (greedy or sampled) to stdout and prints
// prefill and decode speeds to stderr.
#include <chrono>
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "sampling/sampler.h"

namespace efim::app {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_file, prompt_ids;
  int n_predict = 64;
  int threads = 0;
  std::string kv_type = "f16";
  bool special = false, ignore_eos = false, print_ids = false, add_bos = false;
  SamplingParams sampling;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void run_generate(const GenerateArgs& a) {
  validate(a.sampling);
  EFIM_CHECK(a.n_predict >= 0, "--n-predict must be >= 0, got ", a.n_predict);
  LoadedModel m = load_model(a.model, a.threads);
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_token_ids(a.prompt_ids, m.tokenizer.vocab_size());
  } else {
    EncodeOptions eo;
    eo.parse_special = a.special;
    eo.add_bos = a.add_bos;
    prompt = m.tokenizer.encode(text_argument(a.prompt, a.prompt_file, "prompt"), eo);
  }
  EFIM_CHECK(!prompt.empty(), "the prompt is empty (give text, --prompt-file or --prompt-ids)");
  const int64_t ctx = m.model->config().max_position;
  EFIM_CHECK(static_cast<int64_t>(prompt.size()) + a.n_predict <= ctx, "prompt (", prompt.size(),
             " tokens) + --n-predict (", a.n_predict, ") exceeds the context of ", ctx);

  ContiguousSession session(*m.model, static_cast<int64_t>(prompt.size()) + a.n_predict,
                            parse_kv_type(a.kv_type));
  Sampler sampler(a.sampling);
  IncrementalDecoder decoder(m.tokenizer);
  const auto& eos = m.model->config().eos_tokens;
  auto is_eos = [&](int32_t t) {
    if (t == m.tokenizer.eos() || t == m.tokenizer.fim().eot) return true;
    for (auto e : eos)
      if (e == t) return true;
    return false;
  };

  auto t0 = Clock::now();
  std::vector<float> logits = session.eval(prompt);
  double prefill_s = seconds_since(t0);
  auto t1 = Clock::now();
  int generated = 0;
  for (; generated < a.n_predict; ++generated) {
    int32_t next = sampler.sample(logits);
    const bool stop = !a.ignore_eos && is_eos(next);  // the end token is not printed as text
    if (a.print_ids) {
      std::printf(generated ? " %d" : "%d", next);
    } else if (!stop) {
      std::fputs(decoder.push(next).c_str(), stdout);
    }
    std::fflush(stdout);
    if (stop) {
      ++generated;
      break;
    }
    if (generated + 1 < a.n_predict) logits = session.eval({next});
  }
  if (!a.print_ids) std::fputs(decoder.flush().c_str(), stdout);
  std::printf("\n");
  double decode_s = seconds_since(t1);
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); generated %d tokens in %.3f s"
               " (%.1f tok/s)\n", prompt.size(), prefill_s, prompt.size() / prefill_s, generated,
               decode_s, generated > 1 ? (generated - 1) / decode_s : 0.0);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Continue a prompt, streaming the text");
  cmd->add_option("model", a->model, "HF folder or .gguf file")->required();
  cmd->add_option("prompt", a->prompt, "Prompt text");
  cmd->add_option("--prompt-file", a->prompt_file, "Read the prompt from a file");
  cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids (\"1 2 3\")");
  cmd->add_flag("--special", a->special, "Parse special tokens (e.g. <fim_prefix>) in the prompt");
  cmd->add_flag("--add-bos", a->add_bos, "Prepend the BOS token");
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", a->sampling.temperature, "Temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", a->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--seed", a->sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type, "K/V cache element type: f16, q8_0 or f32")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep generating after end-of-text tokens");
  cmd->add_flag("--ids", a->print_ids, "Print generated token ids instead of text");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace efim::app
