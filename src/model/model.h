// Model: a loaded Llama-family checkpoint (HF folder or GGUF file) and its forward pass.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/huge_buffer.h"
#include "base/thread_pool.h"
#include "format/tensor_source.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/ops.h"
#include "model/weights.h"

namespace efim {

struct LoadOptions {
  int n_threads = 0;           // 0: ThreadPool::default_threads(); ignored when pool is set
  ThreadPool* pool = nullptr;  // borrowed pool (must outlive the model); null: own one
  // Use the scalar cpu::matmul_reference (exact f32 products of the stored weights, no
  // activation quantization): slow, for tests and debugging.
  bool reference_matmul = false;
  // Read the weight files into transparent huge pages (MapMode::kPrivateHugePages: fewer TLB
  // misses when decode streams the weights) instead of mapping them from the page cache.
  bool huge_pages = true;
};

class Model {
 public:
  // path: a Hugging Face folder (config.json + safetensors) or a .gguf file.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opts = {});
  // From an already opened source (tests, converters); binds and checks every weight.
  static std::unique_ptr<Model> from_source(const ModelConfig& config,
                                            std::unique_ptr<TensorSource> source,
                                            WeightNaming naming, const LoadOptions& opts = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  ThreadPool& pool() { return *pool_; }
  // Bytes of the file's copy given back after fusing Q|K|V and gate|up (their parts' data
  // pointers in weights() are then null); 0 when the weights are mapped from the file.
  size_t discarded_bytes() const { return discarded_bytes_; }
  // The fused Q|K|V and gate|up matrices' memory: one 2 MB-aligned region advised for
  // transparent huge pages (empty when nothing was fused).
  const uint8_t* fused_data() const { return fused_arena_.data(); }
  size_t fused_bytes() const { return fused_arena_.size(); }

  // Runs one step: writes each token's K/V into `kv` and returns logits for the tokens listed in
  // batch.logits_rows: logits[batch.logits_rows.size(), vocab] f32 (caller-allocated).
  // Throws Error (before touching `kv`) when the batch is inconsistent.
  void forward(const Batch& batch, KvCache& kv, float* logits);
  std::vector<float> forward(const Batch& batch, KvCache& kv);

  // The input rows of every matmul of the forward pass, by where they enter (for activation
  // statistics: efim imatrix). x is [m, cols] f32; expert: the expert of kExpertIn /
  // kExpertDownIn, else -1. Inputs shared by several matrices are reported once: kAttnIn feeds
  // q, k and v; kFfnIn gate and up (c_fc for the GELU MLP) and the experts' router.
  enum class MatmulSite { kAttnIn, kAttnOut, kFfnIn, kFfnDownIn, kExpertIn, kExpertDownIn, kOutput };
  using MatmulObserver = std::function<void(MatmulSite site, int64_t layer, int64_t expert,
                                            const float* x, int64_t m, int64_t cols)>;
  // Null: none (the default; the forward pass then pays one branch per matmul).
  void set_matmul_observer(MatmulObserver o) { observer_ = std::move(o); }

 private:
  void observe(MatmulSite site, int64_t layer, int64_t expert, const float* x, int64_t m,
               int64_t cols) const {
    if (observer_) observer_(site, layer, expert, x, m, cols);
  }
  Model() = default;
  void validate(const Batch& batch, const KvCache& kv) const;
  void attention_block(int64_t layer, const Batch& batch, KvCache& kv);
  void mlp_block(int64_t layer, int64_t n);
  void moe_block(int64_t layer, int64_t n);
  void group_tokens(const Batch& batch);
  // Concatenates the q|k|v and gate|up projections of every layer into one matrix each (one
  // matmul, one pool wake-up and one activation quantization instead of several per token).
  void fuse_projections();
  // The Q4_K matrices of the forward pass rewritten in place, 8 rows interleaved, where the
  // active kernel computes that layout (cpu::can_interleave; interleave.h). In place: the fused
  // copies, and the file's bytes where the source holds a private copy (not with --mmap).
  void interleave_weights();
  // y[m, w.rows] = x[m, w.cols] . W^T with the kernel chosen at load.
  void matmul(const float* x, int64_t m, const cpu::WeightMatrix& w, float* y);
  // y[m, sum of rows] = x . [W0; W1; ...]^T: one matmul when there is one part, else one per
  // part written side by side through s_.part.
  void matmul(const float* x, int64_t m, const std::vector<cpu::WeightMatrix>& parts, float* y);
  // Independent products in one parallel loop (cpu::matmul_jobs; same results as one matmul
  // call per job).
  void matmul_jobs(const std::vector<cpu::MatmulJob>& jobs);
  // moe_block for one token: its k experts' gate and up products in one parallel loop, then
  // their down products in another (2 hand-offs instead of 3 k).
  void moe_one_token(int64_t layer);
  // y[hidden] = norm(x) with weights w (and bias b for LayerNorm); y may alias x.
  void norm_row(const float* x, const std::vector<float>& w, const std::vector<float>& b,
                float* y) const;
  // x += d, then y = norm(x).
  void add_norm_row(float* x, const float* d, const std::vector<float>& w,
                    const std::vector<float>& b, float* y) const;

  ModelConfig config_;
  std::unique_ptr<TensorSource> source_;  // owns the mapped weights
  ModelWeights weights_;
  std::vector<double> inv_freq_;  // [head_dim / 2]
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  bool reference_matmul_ = false;

  // Per layer: W[q_dim + 2 kv_dim, hidden] = rows of Wq, Wk, Wv; W[2 intermediate, hidden] =
  // rows of Wgate, Wup; their bytes live in fused_arena_ (64-byte aligned). Consecutive parts of
  // one dtype are fused; a mixed file (llama.cpp's Q4_K_M keeps attn_v in a wider type) keeps
  // one matrix per run of equal dtypes.
  struct FusedLayer {
    std::vector<cpu::WeightMatrix> qkv, gate_up;
    std::vector<float> bqkv;  // [q_dim + 2 kv_dim]; empty without qkv_bias
  };
  std::vector<FusedLayer> fused_;
  // Every fused matrix, in transparent huge pages: the GEMVs stream them as fast as the
  // file's huge-page copy (in 4 KB pages of malloc the 1.5B shape's gate|up ran at 47 GB/s
  // in decode, the unfused output matrix at 58).
  HugePageBuffer fused_arena_;
  bool is_fused(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= fused_arena_.data() && b < fused_arena_.data() + fused_arena_.size();
  }
  size_t discarded_bytes_ = 0;  // bytes of fused parts given back to the system
  MatmulObserver observer_;

  // Activations of the current step, reused across calls. n = tokens in the step.
  struct Scratch {
    std::vector<float> x;     // [n, hidden] residual stream
    std::vector<float> xn;    // [n, hidden] normalised input of a block
    std::vector<float> qkv;      // [n, q_dim + 2 kv_dim] q | k | v of each token
    std::vector<float> att;      // [n, q_dim] attention output before Wo
    std::vector<float> proj;     // [n, hidden] output of Wo / Wdown
    std::vector<float> gate_up;  // [n, 2 intermediate] gate | up of each token
    std::vector<float> act;      // [n, intermediate] silu(gate) * up
    std::vector<float> part;     // [n, rows of one part] a part of a mixed-dtype fused matmul
    // Mixture of experts; k = experts used per token, m = tokens routed to one expert.
    std::vector<float> router;       // [n, n_experts] router logits, then probabilities
    std::vector<int32_t> route;      // [n, k] chosen experts of each token, ascending
    std::vector<float> route_w;      // [n, k] their weights
    std::vector<int32_t> expert_rows;  // tokens grouped by expert (counting sort of route)
    std::vector<float> expert_rows_w;  // the weight of each entry of expert_rows
    std::vector<int64_t> expert_begin;  // [n_experts + 1] expert e owns entries [begin[e], begin[e+1])
    std::vector<int64_t> expert_fill;   // [n_experts] next free entry of each expert
    std::vector<float> ex, eg, eu, ey;  // [m, hidden], [m, ff], [m, ff], [m, hidden]
    std::vector<cpu::MatmulJob> jobs;   // one token's expert products (moe_block)
    ops::RopeTable rope;
    std::vector<ops::AttentionSeq> seqs;
    ops::AttentionScratch attention;
  } s_;
};

// Single-sequence helper for `generate`: slot = position in a contiguous KvCache.
class ContiguousSession {
 public:
  ContiguousSession(Model& model, int64_t max_tokens, DType kv_type = DType::F32);
  // Appends tokens (positions n_past()..), runs one step and returns the logits of the last
  // token [vocab]; with all_logits, of every appended token [tokens.size(), vocab].
  std::vector<float> eval(const std::vector<int32_t>& tokens, bool all_logits = false);
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return kv_.n_slots(); }
  // Forgets positions >= n (keeps a shared prefix for the next prompt).
  void truncate(int64_t n);

 private:
  Model& model_;
  KvCache kv_;
  int64_t n_past_ = 0;
};

}  // namespace efim
