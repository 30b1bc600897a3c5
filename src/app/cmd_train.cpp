// `efim train`: fine-tunes a Hugging Face Llama folder on the CPU with efim's own trainer
// (src/train/nn), and `efim train --bench`: its speed on random tokens with a per-op breakdown.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>

#include "app/commands.h"
#include "app/loaded.h"
#include "backend/cpu/peak.h"
#include "base/error.h"
#include "base/progress.h"
#include "train/nn/text_source.h"
#include "train/nn/trainer.h"

namespace efim::app {
namespace {

struct TrainArgs {
  std::string model, data, out, save_dtype = "bf16";
  int64_t steps = 100, batch = 8, seq = 1024, accum = 1, warmup = 10;
  double lr = 3e-4, min_lr_ratio = 0.1, weight_decay = 0.1, clip = 1.0;
  int threads = 0;
  uint64_t seed = 1;
  bool bench = false;
};

// Uniform random tokens, every target counted: for the benchmark only.
class RandomSource : public train::BatchSource {
 public:
  RandomSource(int64_t B, int64_t T, int64_t vocab) : B_(B), T_(T), tok_(0, int32_t(vocab - 1)) {}
  void next(train::TokenBatch& b) override {
    b.resize(B_, T_);
    for (auto& t : b.inputs) t = tok_(rng_);
    for (auto& t : b.targets) t = tok_(rng_);
  }
  std::string describe() const override { return "random tokens"; }

 private:
  int64_t B_, T_;
  std::mt19937 rng_{7};
  std::uniform_int_distribution<int32_t> tok_;
};

train::TrainOptions train_options(const TrainArgs& a) {
  train::TrainOptions o;
  o.accum = a.accum;
  o.lr = train::LrSchedule{a.lr, a.warmup, a.steps, a.min_lr_ratio};
  o.adam.weight_decay = a.weight_decay;
  o.clip = a.clip;
  return o;
}

// Model FLOPs of one token of a training step (forward + backward = 3x forward): 2 per
// multiply-add of every projection and the head, and of the causal attention products
// (Q K^T and P V, T/2 keys on average).
double flops_per_token(const ModelConfig& c, int64_t T) {
  const double D = double(c.hidden), F = double(c.intermediate);
  const double proj = D * double(c.q_dim() + 2 * c.kv_dim()) + D * double(c.q_dim()) + 3 * D * F;
  const double attn = 2.0 * double(c.q_dim()) * double(T) / 2.0;
  return 3.0 * 2.0 * (double(c.n_layers) * (proj + attn) + double(c.vocab) * D);
}

void print_breakdown(const train::OpTimes& t, double total, double optimizer) {
  std::printf("%-12s %9s %9s %7s\n", "op", "fwd s", "bwd s", "share");
  for (size_t i = 0; i < t.forward.size(); ++i) {
    const double s = t.forward[i] + t.backward[i];
    std::printf("%-12s %9.3f %9.3f %6.1f%%\n",
                std::string(train::op_name(static_cast<train::Op>(i))).c_str(), t.forward[i],
                t.backward[i], 100 * s / total);
  }
  std::printf("%-12s %9s %9.3f %6.1f%%\n", "clip+adamw", "", optimizer, 100 * optimizer / total);
  std::printf(
      "(head+xent: logits, softmax, loss and the head's backward, all in the fwd column)\n");
}

void run_bench(const TrainArgs& a) {
  ThreadPool pool(a.threads > 0 ? a.threads : ThreadPool::default_threads());
  train::Params p = train::load_hf_params(a.model);
  const ModelConfig& c = p.layout.config;
  train::Trainer tr(p, pool, train_options(a));
  RandomSource src(a.batch, a.seq, c.vocab);
  std::printf("model %s: %s, %.2fM parameters; batch %lld x %lld, %d threads\n", a.model.c_str(),
              c.summary().c_str(), double(p.layout.total) / 1e6, (long long)a.batch,
              (long long)a.seq, pool.size());
  tr.step(src);  // warm-up: allocations, page faults
  tr.network().reset_times();
  const std::clock_t cpu0 = std::clock();
  double secs = 0, fwd_bwd = 0;
  int64_t tokens = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    const train::StepStats st = tr.step(src);
    secs += st.seconds;
    tokens += st.tokens;
    std::printf("step %lld: loss %.4f, %.2f s, %.0f tokens/s\n", (long long)s, st.loss, st.seconds,
                double(st.tokens) / st.seconds);
  }
  const double cpu_secs = double(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const train::OpTimes& t = tr.network().times();
  for (size_t i = 0; i < t.forward.size(); ++i) fwd_bwd += t.forward[i] + t.backward[i];
  const double tps = double(tokens) / secs;
  const double gflops = tps * flops_per_token(c, a.seq) / 1e9;
  const double peak = cpu::measure_fma_peak_gflops(pool);
  std::printf(
      "\n%.0f tokens/s, %.1f MFLOP/token (model FLOPs), %.1f GFLOP/s = %.0f%% of the "
      "measured FMA peak %.1f GFLOP/s\n\n",
      tps, flops_per_token(c, a.seq) / 1e6, gflops, 100 * gflops / peak, peak);
  // On a shared machine the threads get less than a core each: CPU time shows how much.
  std::printf(
      "process CPU time %.1f s in %.1f s wall (%.2f of %d cores busy): %.0f tokens per "
      "CPU-second, i.e. about %.0f tokens/s with %d idle cores\n\n",
      cpu_secs, secs, cpu_secs / secs, pool.size(), double(tokens) / cpu_secs,
      double(tokens) / cpu_secs * pool.size(), pool.size());
  print_breakdown(t, secs, secs - fwd_bwd);
}

void run_train(const TrainArgs& a) {
  EFIM_CHECK(!a.data.empty() && !a.out.empty(),
             "efim train: --data and --out are required "
             "(or --bench)");
  const DType save_dtype = dtype_from_name(a.save_dtype);
  ThreadPool pool(a.threads > 0 ? a.threads : ThreadPool::default_threads());
  train::Params p = train::load_hf_params(a.model);
  const Tokenizer tok = load_tokenizer(a.model);
  train::TextSourceOptions so;
  so.path = a.data;
  so.B = a.batch;
  so.T = a.seq;
  so.eot = tok.eos();
  so.seed = a.seed;
  train::TextBatchSource src(tok, so);
  std::fprintf(stderr, "data: %s\n", src.describe().c_str());
  train::Trainer tr(p, pool, train_options(a));
  ProgressBar bar(uint64_t(a.steps * a.batch * a.seq * a.accum),
                  ProgressOptions{"training", "tok"});
  for (int64_t s = 0; s < a.steps; ++s) {
    const train::StepStats st = tr.step(src);
    bar.set_note(
        str("step ", s + 1, "/", a.steps, " loss ", st.loss, " lr ", st.lr, " |g| ", st.grad_norm));
    bar.add(uint64_t(st.tokens));
    std::printf("step %lld loss %.4f lr %.3g grad_norm %.3f tokens/s %.0f\n", (long long)s, st.loss,
                st.lr, st.grad_norm, double(st.tokens) / st.seconds);
    std::fflush(stdout);
  }
  bar.finish();
  train::save_hf_params(p, train::SaveOptions{a.out, save_dtype, a.model, 0});
  std::printf("saved %s (%s)\n", a.out.c_str(), a.save_dtype.c_str());
}

}  // namespace

void register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand(
      "train",
      "Fine-tune a Hugging Face Llama folder on the CPU (AdamW, warmup + cosine, clipping).\n"
      "Data for now: plain text (a file, or every file under a folder), tokenized canonically "
      "with the model's tokenizer.json, files joined with <eos> and cut into sequences of "
      "--seq tokens. (The fragment-tokenized FIM shard source is not plugged in yet.)\n"
      "--bench: speed on random tokens (no data, nothing saved), with a per-op breakdown.");
  cmd->add_option("--model", a->model, "HF folder: config.json, safetensors, tokenizer.json")
      ->required();
  cmd->add_option("--data", a->data, "Text file or folder to train on");
  cmd->add_option("--out", a->out, "Folder to write the fine-tuned model to");
  cmd->add_option("--steps", a->steps, "Optimizer steps (with --bench: timed steps)")
      ->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences per micro-batch")->capture_default_str();
  cmd->add_option("--seq", a->seq, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--accum", a->accum, "Micro-batches per step")->capture_default_str();
  cmd->add_option("--lr", a->lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "Linear warmup steps")->capture_default_str();
  cmd->add_option("--min-lr-ratio", a->min_lr_ratio, "Cosine floor as a share of --lr")
      ->capture_default_str();
  cmd->add_option("--weight-decay", a->weight_decay, "AdamW decay of matrices")
      ->capture_default_str();
  cmd->add_option("--clip", a->clip, "Max global gradient norm (0: off)")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads (default: EFIM_THREADS or all CPUs)");
  cmd->add_option("--seed", a->seed, "Data order seed")->capture_default_str();
  cmd->add_option("--save-dtype", a->save_dtype, "bf16 or f32")->capture_default_str();
  cmd->add_flag("--bench", a->bench, "Measure training speed on random tokens");
  cmd->callback([a] { a->bench ? run_bench(*a) : run_train(*a); });
}

}  // namespace efim::app
