// `efim train`: fine-tunes a Hugging Face Llama folder on the CPU with efim's own trainer
// (src/train/nn), and `efim train --bench`: its speed on random tokens with a per-op breakdown.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>

#include "app/commands.h"
#include "app/loaded.h"
#include "backend/cpu/peak.h"
#include "base/error.h"
#include "base/progress.h"
#include "train/nn/checkpoint.h"
#include "train/nn/shard_source.h"
#include "train/nn/text_source.h"
#include "train/nn/trainer.h"

namespace efim::app {
namespace {

struct TrainArgs {
  std::string model, data, out, save_dtype = "bf16", mask = "all", gguf = "q8_0";
  std::string valid, resume, checkpoint_dir, log;
  int64_t eval_every = 0, eval_batches = 8, save_every = 0, stop_at = 0;
  int64_t steps = 100, batch = 8, seq = 1024, accum = 1, warmup = 10;
  int64_t head_rows = 256, attn_block = 64;  // NetworkOptions (speed; they change rounding)
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
  o.net.head_rows = a.head_rows;
  o.net.attention_row_block = a.attn_block;
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

// The options that define a run's trajectory: stored in checkpoints, restored on --resume.
nlohmann::json run_json(const TrainArgs& a) {
  return {{"model", a.model},
          {"data", a.data},
          {"mask", a.mask},
          {"valid", a.valid},
          {"steps", a.steps},
          {"batch", a.batch},
          {"seq", a.seq},
          {"accum", a.accum},
          {"warmup", a.warmup},
          {"lr", a.lr},
          {"min_lr_ratio", a.min_lr_ratio},
          {"weight_decay", a.weight_decay},
          {"clip", a.clip},
          {"seed", a.seed},
          {"eval_every", a.eval_every},
          {"eval_batches", a.eval_batches},
          {"save_dtype", a.save_dtype},
          {"head_rows", a.head_rows},
          {"attn_block", a.attn_block}};
}

void restore_run(const nlohmann::json& j, TrainArgs& a) {
  try {
    a.model = j.at("model"), a.data = j.at("data"), a.mask = j.at("mask"), a.valid = j.at("valid");
    a.steps = j.at("steps"), a.batch = j.at("batch"), a.seq = j.at("seq"), a.accum = j.at("accum");
    a.warmup = j.at("warmup"), a.lr = j.at("lr"), a.min_lr_ratio = j.at("min_lr_ratio");
    a.weight_decay = j.at("weight_decay"), a.clip = j.at("clip"), a.seed = j.at("seed");
    a.eval_every = j.at("eval_every"), a.eval_batches = j.at("eval_batches");
    a.save_dtype = j.at("save_dtype");
    a.head_rows = j.at("head_rows"), a.attn_block = j.at("attn_block");
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint state.json 'run': ", e.what());
  }
}

struct RunState {
  train::Params p;
  train::CheckpointState resumed;
  std::string tok_dir;             // tokenizer + config files to copy into saved folders
  std::unique_ptr<Tokenizer> tok;  // loaded from tok_dir when a text source needs it
};

// A shard folder (index.json) gives FIM batches; anything else is plain text.
std::unique_ptr<train::BatchSource> make_source(const TrainArgs& a, const std::string& path,
                                                uint64_t seed, RunState& r) {
  if (train::is_shard_dir(path))
    return std::make_unique<train::ShardBatchSource>(
        train::ShardSourceOptions{path, a.batch, a.seq, seed, train::parse_loss_mask(a.mask)});
  EFIM_CHECK(a.mask == "all", "efim train: --mask ", a.mask, " needs a shard folder, '", path,
             "' has no index.json");
  if (!r.tok) r.tok = std::make_unique<Tokenizer>(load_tokenizer(r.tok_dir));
  train::TextSourceOptions so;
  so.path = path;
  so.B = a.batch;
  so.T = a.seq;
  so.eot = r.tok->eos();
  so.seed = seed;
  return std::make_unique<train::TextBatchSource>(*r.tok, so);
}

// Mean nats per target over the first `eval_batches` batches of the validation data (always
// the same batches: a fresh source with seed 0).
double validation_loss(const TrainArgs& a, train::Trainer& tr, RunState& r) {
  auto src = make_source(a, a.valid, 0, r);
  train::TokenBatch b;
  train::LossSum total;
  for (int64_t i = 0; i < a.eval_batches; ++i) {
    src->next(b);
    const train::LossSum l = tr.network().forward_backward(r.p.w.data(), b, nullptr, 0.0f);
    total.sum += l.sum;
    total.count += l.count;
  }
  EFIM_CHECK(total.count > 0, "efim train: no masked targets in ", a.eval_batches,
             " validation batches of ", a.valid);
  return total.mean();
}

// One JSON object per line: training steps and validation results, appended (resumes add on).
class TrainLog {
 public:
  explicit TrainLog(const std::string& path) : f_(std::fopen(path.c_str(), "a")) {
    EFIM_CHECK(f_ != nullptr, "efim train: cannot open log file ", path);
  }
  ~TrainLog() { std::fclose(f_); }
  void write(const nlohmann::json& j) {
    std::fprintf(f_, "%s\n", j.dump().c_str());
    std::fflush(f_);
  }

 private:
  std::FILE* f_;
};

RunState start_run(TrainArgs& a) {
  RunState r;
  if (a.resume.empty()) {
    r.p = train::load_hf_params(a.model);
    r.tok_dir = a.model;
    return r;
  }
  r.resumed = train::read_checkpoint_state(a.resume);
  restore_run(r.resumed.run, a);
  r.p = train::load_checkpoint_params(a.resume);
  r.tok_dir = (std::filesystem::path(a.resume) / "model").string();
  std::fprintf(stderr, "resuming %s at step %lld (options from the checkpoint)\n", a.resume.c_str(),
               (long long)r.resumed.step);
  return r;
}

void save_checkpoint_now(const TrainArgs& a, const RunState& r, const train::Trainer& tr) {
  train::CheckpointState st;
  st.step = tr.steps_taken();
  st.batches = st.step * a.accum;
  st.run = run_json(a);
  train::save_checkpoint({a.checkpoint_dir, r.tok_dir, dtype_from_name(a.save_dtype)}, r.p, tr, st);
  std::fprintf(stderr, "checkpoint %s (step %lld)\n", a.checkpoint_dir.c_str(), (long long)st.step);
}

// Training on fragment-tokenized shards (efim data build --fragment-rate > 0) is declared in
// the saved config.json ("efim_fragment_tokenization", with the rate), which the converter
// carries into the GGUF as efim.fragment_tokenization: the server then knows that the model
// continues partial words after the middle sentinel and does not token-heal its EFIM prompts.
void declare_fragment_training(const std::string& out, const std::string& data) {
  if (!train::is_shard_dir(data)) return;
  const auto index = nlohmann::json::parse(
      read_file((std::filesystem::path(data) / "index.json").string()), nullptr, false);
  if (index.is_discarded() || !index.contains("build")) return;
  const double rate = index["build"].value("fragment_rate", 0.0);
  if (rate <= 0) return;
  const std::string path = (std::filesystem::path(out) / "config.json").string();
  auto cfg = nlohmann::ordered_json::parse(read_file(path));
  cfg["efim_fragment_tokenization"] = true;
  cfg["efim_fragment_rate"] = rate;
  write_file(path, cfg.dump(1) + "\n");
}

// The saved HF folder as <out>/model-<dtype>.gguf, the file `efim serve` takes.
void write_gguf(const std::string& out, const std::string& dtype) {
  const std::string path = (std::filesystem::path(out) / ("model-" + dtype + ".gguf")).string();
  FolderConvertOptions co;
  co.type = file_type_from_name(dtype);
  const ConvertResult c = convert_folder_to_gguf(out, path, co);
  std::printf("wrote %s: %lld tensors, %s of tensor data\n", path.c_str(),
              static_cast<long long>(c.n_tensors), human_bytes(double(c.tensor_bytes)).c_str());
}

void run_train(TrainArgs a) {
  EFIM_CHECK(!a.out.empty() && (!a.resume.empty() || (!a.model.empty() && !a.data.empty())),
             "efim train: --model, --data and --out are required (or --resume DIR and --out, or "
             "--bench)");
  RunState r = start_run(a);
  EFIM_CHECK(a.eval_every == 0 || !a.valid.empty(), "efim train: --eval-every ", a.eval_every,
             " needs --valid");
  const DType save_dtype = dtype_from_name(a.save_dtype);
  if (a.gguf != "none") (void)file_type_from_name(a.gguf);  // a bad name fails before training
  if (a.checkpoint_dir.empty()) a.checkpoint_dir = a.out + "/checkpoint";
  std::filesystem::create_directories(a.out);
  ThreadPool pool(a.threads > 0 ? a.threads : ThreadPool::default_threads());
  auto src = make_source(a, a.data, a.seed, r);
  src->skip(r.resumed.batches);
  std::fprintf(stderr, "data: %s\n", src->describe().c_str());
  train::Trainer tr(r.p, pool, train_options(a));
  if (!a.resume.empty()) train::load_checkpoint_optimizer(a.resume, tr);
  TrainLog log(a.log.empty() ? a.out + "/train_log.jsonl" : a.log);
  const bool eval = !a.valid.empty() && a.eval_batches > 0;
  if (eval && tr.steps_taken() == 0) {
    const double vl = validation_loss(a, tr, r);
    std::printf("step 0 valid_loss %.4f\n", vl);
    log.write({{"step", 0}, {"valid_loss", vl}});
  }
  // --stop-at ends this invocation early (the schedule still spans --steps): a long run can be
  // done in pieces, each ending in a checkpoint.
  const int64_t stop = a.stop_at > 0 ? std::min(a.stop_at, a.steps) : a.steps;
  ProgressBar bar(
      uint64_t(std::max<int64_t>(0, stop - tr.steps_taken()) * a.batch * a.seq * a.accum),
      ProgressOptions{"training", "tok"});
  while (tr.steps_taken() < stop) {
    const train::StepStats st = tr.step(*src);
    const int64_t done = st.step + 1;
    nlohmann::json rec = {
        {"step", done},          {"loss", st.loss},
        {"lr", st.lr},           {"grad_norm", st.grad_norm},
        {"tokens", st.tokens},   {"targets", st.targets},
        {"seconds", st.seconds}, {"tokens_per_s", double(st.tokens) / st.seconds}};
    std::printf("step %lld loss %.4f lr %.3g grad_norm %.3f tokens/s %.0f", (long long)done,
                st.loss, st.lr, st.grad_norm, double(st.tokens) / st.seconds);
    if (eval && a.eval_every > 0 && (done % a.eval_every == 0 || done == stop)) {
      rec["valid_loss"] = validation_loss(a, tr, r);
      std::printf(" valid_loss %.4f", rec["valid_loss"].get<double>());
    }
    std::printf("\n");
    std::fflush(stdout);
    log.write(rec);
    bar.set_note(str("step ", done, "/", a.steps, " loss ", st.loss));
    bar.add(uint64_t(st.tokens));
    if (a.save_every > 0 && (done % a.save_every == 0 || done == stop))
      save_checkpoint_now(a, r, tr);
  }
  bar.finish();
  train::save_hf_params(r.p, train::SaveOptions{a.out, save_dtype, r.tok_dir, 0});
  declare_fragment_training(a.out, a.data);
  std::printf("saved %s (%s)\n", a.out.c_str(), a.save_dtype.c_str());
  if (a.gguf != "none") write_gguf(a.out, a.gguf);
}

}  // namespace

void register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand(
      "train",
      "Fine-tune a Hugging Face Llama folder on the CPU (AdamW, warmup + cosine, clipping).\n"
      "Data: a shard folder from `efim data build` (index.json: fragment-tokenized FIM samples "
      "packed into rows of --seq tokens, loss on --mask all|middle), or plain text (a file, or "
      "every file under a folder, tokenized canonically, files joined with <eos>).\n"
      "Writes <out>/train_log.jsonl (one JSON line per step, plus valid_loss when evaluated), "
      "checkpoints with --save-every (resume bit-exactly with --resume), and the model as an HF "
      "folder in --out at the end, plus <out>/model-<dtype>.gguf for `efim serve` (--gguf).\n"
      "--bench: speed on random tokens (no data, nothing saved), with a per-op breakdown.");
  cmd->add_option("--model", a->model, "HF folder: config.json, safetensors, tokenizer.json");
  cmd->add_option("--data", a->data, "Shard folder (index.json) or text file/folder to train on");
  cmd->add_option("--mask", a->mask, "Loss on all targets or only FIM middles (shards only)")
      ->check(CLI::IsMember({"all", "middle"}))
      ->capture_default_str();
  cmd->add_option("--valid", a->valid, "Validation shard folder (or text) for --eval-every");
  cmd->add_option("--eval-every", a->eval_every,
                  "With --valid: validation loss at step 0, every N steps and at the end "
                  "(0: at step 0 only)")
      ->capture_default_str();
  cmd->add_option("--eval-batches", a->eval_batches,
                  "Validation batches (the same first K batches each time)")
      ->capture_default_str();
  cmd->add_option("--save-every", a->save_every,
                  "Checkpoint every N steps and at the end (0: never)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir,
                  "Checkpoint folder (default <out>/checkpoint; replaced atomically)");
  cmd->add_option("--resume", a->resume,
                  "Continue from a checkpoint folder; the run's options come from it");
  cmd->add_option("--stop-at", a->stop_at,
                  "End this invocation after step N (schedule unchanged; checkpoint there with "
                  "--save-every), to run in pieces with --resume");
  cmd->add_option("--log", a->log, "JSONL log file (default <out>/train_log.jsonl, appended)");
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
  cmd->add_option("--head-rows", a->head_rows, "Rows of logits computed at a time (speed/memory)")
      ->capture_default_str();
  cmd->add_option("--attn-block", a->attn_block, "Query rows per attention block (speed)")
      ->capture_default_str();
  cmd->add_option("--save-dtype", a->save_dtype, "bf16 or f32")->capture_default_str();
  cmd->add_option("--gguf", a->gguf,
                  "Matrix dtype of <out>/model-<dtype>.gguf written at the end: f32, f16, bf16, "
                  "q8_0, q4_0, or none")
      ->capture_default_str();
  cmd->add_flag("--bench", a->bench, "Measure training speed on random tokens");
  cmd->callback([a] {
    if (a->bench) {
      EFIM_CHECK(!a->model.empty(), "efim train --bench: --model is required");
      run_bench(*a);
    } else {
      run_train(*a);
    }
  });
}

}  // namespace efim::app
