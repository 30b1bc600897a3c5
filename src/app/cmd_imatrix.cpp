// `efim imatrix MODEL -f TEXT -o IMATRIX.gguf [--ctx 512] [--chunks N] [-t N]`: an importance
// matrix as llama-imatrix computes it (the mean square of every input column of every weight
// matrix over the text), written in llama-imatrix's GGUF format for `efim convert --imatrix`
// and `llama-quantize --imatrix`. The text is tokenized once and cut into chunks of --ctx
// tokens, each evaluated on its own (with BOS where the tokenizer adds one), every position's
// rows observed, the output head's included.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "base/mmap_file.h"
#include "format/imatrix.h"
#include "model/imatrix_collector.h"

namespace efim::app {
namespace {

struct ImatrixArgs {
  std::string model, text, out;
  int ctx = 512, chunks = 0, threads = 0;
};

void run_imatrix(const ImatrixArgs& a) {
  EFIM_CHECK(a.ctx >= 2, "--ctx ", a.ctx, " must be >= 2");
  EFIM_CHECK(a.chunks >= 0, "--chunks ", a.chunks, " must be >= 0 (0: the whole text)");
  LoadedModel lm = load_model(a.model, a.threads);
  Model& model = *lm.model;
  const std::vector<int32_t> ids = lm.tokenizer.encode(read_file(a.text));
  const bool bos = lm.tokenizer.add_bos_default() && lm.tokenizer.bos() >= 0;
  const int64_t per_chunk = a.ctx - (bos ? 1 : 0);
  int64_t n_chunks = static_cast<int64_t>(ids.size()) / per_chunk;
  if (a.chunks > 0) n_chunks = std::min<int64_t>(n_chunks, a.chunks);
  EFIM_CHECK(n_chunks > 0, a.text, ": ", ids.size(), " tokens, fewer than one chunk of ", per_chunk,
             " (lower --ctx)");
  ImatrixCollector stats(model.config());
  model.set_matmul_observer([&stats](Model::MatmulSite site, int64_t layer, int64_t expert,
                                     const float* x, int64_t m, int64_t cols) {
    stats.add(site, layer, expert, x, m, cols);
  });
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk;
    if (bos) chunk.push_back(lm.tokenizer.bos());
    chunk.insert(chunk.end(), ids.begin() + c * per_chunk, ids.begin() + (c + 1) * per_chunk);
    ContiguousSession session(model, static_cast<int64_t>(chunk.size()));
    session.eval(chunk, /*all_logits=*/true);  // every row through the output head too
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\rimatrix: chunk %lld/%lld, %.1f s", static_cast<long long>(c + 1),
                 static_cast<long long>(n_chunks), s);
  }
  std::fprintf(stderr, "\n");
  model.set_matmul_observer(nullptr);
  ImportanceMatrix m = stats.result();
  m.datasets = {std::filesystem::path(a.text).filename().string()};
  m.chunk_count = n_chunks;
  m.chunk_size = a.ctx;
  write_imatrix_gguf(m, a.out);
  std::printf("wrote %s: %zu matrices, %lld chunks of %d tokens (%lld tokens)\n", a.out.c_str(),
              m.entries.size(), static_cast<long long>(n_chunks), a.ctx,
              static_cast<long long>(stats.tokens_seen()));
}

}  // namespace

void register_imatrix(CLI::App& app) {
  auto a = std::make_shared<ImatrixArgs>();
  auto* cmd = app.add_subcommand(
      "imatrix", "Compute an importance matrix from a text (llama-imatrix's GGUF format)");
  cmd->add_option("model", a->model, "HF folder or .gguf file (best: unquantized)")->required();
  cmd->add_option("-f,--file", a->text, "Calibration text (code in the languages you use)")
      ->required();
  cmd->add_option("-o,--output", a->out, "Importance matrix to write (.gguf)")->required();
  cmd->add_option("--ctx", a->ctx, "Tokens per chunk")->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "Chunks to evaluate (0: all the text holds)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)");
  cmd->callback([a] { run_imatrix(*a); });
}

}  // namespace efim::app
