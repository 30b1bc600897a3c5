// `efim generate MODEL PROMPT`: streams a continuation (greedy or sampled) to stdout and prints
// prefill and decode speeds to stderr.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "engine/engine.h"
#include "sampling/sampler.h"

namespace efim::app {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_file, prompt_ids;
  int n_predict = 64;
  int threads = 0;
  std::string kv_type = "f16";
  std::string speculative;  // empty: draft with --draft-model, else off
  std::string draft_model;
  int draft_min = 1, draft_max = 8;
  bool special = false, ignore_eos = false, print_ids = false, add_bos = false;
  SamplingParams sampling;
};

// Runs on the engine (one request), so speculation on and off take the same path.
EngineOptions generate_engine(const GenerateArgs& a, const LoadedModel& m, Model* draft,
                              int64_t n_tokens) {
  EngineOptions eo;
  eo.kv_type = parse_kv_type(a.kv_type);
  eo.kv.block_size = 16;
  // Drafts never reach past prompt + max_tokens (Engine::draft), so n_tokens slots suffice.
  eo.kv.n_blocks = static_cast<int32_t>((n_tokens + 15) / 16);
  // The whole prompt in one step, as a plain forward pass would take it.
  eo.scheduler.max_step_tokens = static_cast<int32_t>(n_tokens);
  eo.scheduler.max_running = 1;
  eo.tokenizer = &m.tokenizer;
  std::vector<int32_t> eos(m.model->config().eos_tokens.begin(), m.model->config().eos_tokens.end());
  for (int32_t t : {m.tokenizer.eos(), m.tokenizer.fim().eot})
    if (t >= 0) eos.push_back(t);
  eo.eos_tokens = eos;
  eo.speculative = speculative_options(a.speculative, a.draft_min, a.draft_max, draft != nullptr);
  eo.speculative.draft_model = draft;
  eo.speculative.draft.max_sessions = 1;
  return eo;
}

void run_generate(const GenerateArgs& a) {
  validate(a.sampling);
  EFIM_CHECK(a.n_predict >= 0, "--n-predict must be >= 0, got ", a.n_predict);
  // A bad --speculative fails before any model loads.
  const bool speculating =
      speculative_options(a.speculative, a.draft_min, a.draft_max, !a.draft_model.empty()).enabled;
  LoadedModel m = load_model(a.model, a.threads);
  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty()) draft = load_draft_model(a.draft_model, m);
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
  if (a.n_predict == 0) return (void)std::printf("\n");

  Engine engine(*m.model,
                generate_engine(a, m, draft.get(), static_cast<int64_t>(prompt.size()) + a.n_predict));
  Request r;
  r.prompt = prompt;
  r.sampling = a.sampling;
  r.max_tokens = a.n_predict;
  r.ignore_eos = a.ignore_eos;
  const size_t n_prompt = prompt.size();
  std::shared_ptr<RequestStream> stream = engine.submit(std::move(r));
  bool first = true;
  for (StreamChunk c = stream->next(); !c.empty(); c = stream->next()) {
    if (a.print_ids) {
      for (int32_t t : c.tokens) std::printf(first ? "%d" : " %d", t), first = false;
    } else {
      std::fputs(c.text.c_str(), stdout);
    }
    std::fflush(stdout);
  }
  const RequestResult res = stream->wait();
  if (a.print_ids && res.stop_token >= 0) std::printf(first ? "%d" : " %d", res.stop_token);
  std::printf("\n");
  EFIM_CHECK(res.finish != FinishReason::error, res.error);
  // The end token counts as generated (it was computed and drawn), as llama.cpp counts it.
  const int generated = static_cast<int>(res.tokens.size()) + (res.stop_token >= 0);
  const double prefill_s = res.timings.first_token_ms / 1000.0;
  const double decode_s = (res.timings.total_ms - res.timings.first_token_ms) / 1000.0;
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); generated %d tokens in %.3f s"
               " (%.1f tok/s)\n", n_prompt, prefill_s, n_prompt / prefill_s, generated, decode_s,
               generated > 1 && decode_s > 0 ? (generated - 1) / decode_s : 0.0);
  if (speculating) {
    std::fprintf(stderr, "speculative: %d decode steps for %d tokens (%.2f tokens per step); %d "
                 "draft tokens, %d accepted (%.1f%%)\n", res.n_steps - 1, generated - 1,
                 res.n_steps > 1 ? double(generated - 1) / (res.n_steps - 1) : 0.0,
                 res.n_draft_tokens, res.n_accepted,
                 res.n_draft_tokens ? 100.0 * res.n_accepted / res.n_draft_tokens : 0.0);
    if (draft) {
      const EngineMetrics em = engine.metrics();
      std::fprintf(stderr, "draft model: %lld tokens computed\n",
                   static_cast<long long>(em.draft_model_evaluated));
    }
  }
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
  cmd->add_option("--speculative", a->speculative,
                  "Speculative decoding: ngram (drafts copied from the prompt and output), draft "
                  "(a draft model's greedy continuation), ngram+draft (the draft model where the "
                  "n-gram finds none) or off; default: draft with --draft-model, else off")
      ->capture_default_str();
  cmd->add_option("--draft-model,--model-draft", a->draft_model,
                  "A small model with the same tokenizer that drafts (HF folder or .gguf)");
  cmd->add_option("--draft-min", a->draft_min, "Shortest speculative draft")->capture_default_str();
  cmd->add_option("--draft-max", a->draft_max, "Longest speculative draft")->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep generating after end-of-text tokens");
  cmd->add_flag("--ids", a->print_ids, "Print generated token ids instead of text");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace efim::app
