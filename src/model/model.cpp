// Model loading, KV storage and the single-sequence session. The forward pass is in forward.cpp.
#include "model/model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "backend/cpu/interleave.h"
#include "base/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "tensor/quant.h"

namespace efim {

// ---------------------------------------------------------------- KvCache, Batch

int64_t KvCache::row_bytes(DType type, int64_t n) {
  EFIM_CHECK(type == DType::F32 || type == DType::F16 || type == DType::Q8_0,
             "kv cache: element type ", dtype_name(type), " is not stored; use f32, f16 or q8_0");
  EFIM_CHECK(n > 0 && n % dtype_info(type).block_elems == 0, "kv cache: rows of ", n,
             " values are not whole blocks of ", dtype_name(type), " (",
             dtype_info(type).block_elems, " values)");
  return static_cast<int64_t>(dtype_row_bytes(type, static_cast<uint64_t>(n)));
}

DType parse_kv_type(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "q8_0") return DType::Q8_0;
  throw Error(str("K/V cache type '", name, "' is not one of f32, f16, q8_0"));
}

KvCache::KvCache(int64_t n_layers, int64_t n_slots, int64_t kv_dim, DType type,
                 int64_t n_kv_heads)
    : n_layers_(n_layers), n_slots_(n_slots), kv_dim_(kv_dim), n_kv_heads_(n_kv_heads),
      type_(type) {
  EFIM_CHECK(n_layers > 0 && n_slots > 0 && n_kv_heads > 0 && kv_dim > 0 &&
                 kv_dim % n_kv_heads == 0,
             "kv cache: bad size: layers ", n_layers, ", slots ", n_slots, ", kv_dim ", kv_dim,
             " in ", n_kv_heads, " heads");
  head_bytes_ = row_bytes(type, kv_dim / n_kv_heads);
  const size_t n = static_cast<size_t>(n_layers) * static_cast<size_t>(layer_bytes());
  k_ = HugePageBuffer(n);
  v_ = HugePageBuffer(n);
}

KvCache KvCache::for_model(const ModelConfig& c, int64_t n_slots, DType type) {
  const int block = dtype_info(type).block_elems;
  EFIM_CHECK(c.head_dim % block == 0, "kv cache: ", dtype_name(type), " needs a head_dim that is ",
             "a multiple of ", block, ", the model's is ", c.head_dim, "; use --kv-type f16");
  return KvCache(c.n_layers, n_slots, c.kv_dim(), type, c.n_kv_heads);
}

namespace {
void encode_row(DType type, const float* x, int64_t n, uint8_t* out) {
  switch (type) {
    case DType::F32: std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: {
      uint16_t h[64];
      for (int64_t i = 0; i < n; i += 64) {  // through a buffer: `out` need not be aligned
        const int64_t m = std::min<int64_t>(64, n - i);
        for (int64_t j = 0; j < m; ++j) h[j] = f32_to_f16(x[i + j]);
        std::memcpy(out + 2 * i, h, static_cast<size_t>(m) * 2);
      }
      return;
    }
    case DType::Q8_0: quantize_row_q8_0(x, n, reinterpret_cast<BlockQ8_0*>(out)); return;
    default: break;
  }
  throw Error(str("kv cache: cannot store ", dtype_name(type)));
}
}  // namespace

void KvCache::store(int64_t layer, int64_t slot, const float* k, const float* v) {
  const int64_t hd = kv_dim_ / n_kv_heads_;
  for (int64_t h = 0; h < n_kv_heads_; ++h) {
    encode_row(type_, k + h * hd, hd, k_.data() + offset(layer, h, slot));
    encode_row(type_, v + h * hd, hd, v_.data() + offset(layer, h, slot));
  }
}

void KvCache::load(int64_t layer, int64_t slot, float* k, float* v) const {
  EFIM_CHECK(layer >= 0 && layer < n_layers_ && slot >= 0 && slot < n_slots_,
             "kv cache: load of layer ", layer, " slot ", slot, " outside ", n_layers_, " x ",
             n_slots_);
  const int64_t hd = kv_dim_ / n_kv_heads_;
  for (int64_t h = 0; h < n_kv_heads_; ++h) {
    dequantize(k_.data() + offset(layer, h, slot), hd, type_, k + h * hd);
    dequantize(v_.data() + offset(layer, h, slot), hd, type_, v + h * hd);
  }
}

void KvCache::copy_slot(int64_t from, int64_t to) {
  EFIM_CHECK(from >= 0 && from < n_slots_ && to >= 0 && to < n_slots_, "kv cache: copy_slot ", from,
             " -> ", to, " outside [0, ", n_slots_, ")");
  const size_t n = static_cast<size_t>(head_bytes_);
  for (int64_t l = 0; l < n_layers_; ++l)
    for (int64_t h = 0; h < n_kv_heads_; ++h) {
      std::memcpy(k_.data() + offset(l, h, to), k_.data() + offset(l, h, from), n);
      std::memcpy(v_.data() + offset(l, h, to), v_.data() + offset(l, h, from), n);
    }
}

int32_t Batch::add_sequence(std::vector<int32_t> slots) {
  sequences.push_back(BatchSequence{std::move(slots)});
  return static_cast<int32_t>(sequences.size() - 1);
}

void Batch::add_token(int32_t token, int32_t position, int32_t seq_index, bool want_logits) {
  if (want_logits) logits_rows.push_back(static_cast<int32_t>(tokens.size()));
  tokens.push_back(token);
  positions.push_back(position);
  seq.push_back(seq_index);
}

// ---------------------------------------------------------------- loading

namespace {

bool has_gguf_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

MapMode map_mode(const LoadOptions& o) {
  return o.huge_pages ? MapMode::kPrivateHugePages : MapMode::kShared;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    ModelConfig c = config_from_hf_file((fs::path(path) / "config.json").string());
    std::unique_ptr<TensorSource> src = SafetensorsFolder::open(path, map_mode(opts));
    return from_source(c, std::move(src), WeightNaming::HF, opts);
  }
  EFIM_CHECK(fs::is_regular_file(path, ec), "model: ", path,
             " is neither a model folder nor a file");
  EFIM_CHECK(has_gguf_magic(path), "model: ", path,
             " is not a GGUF file (expected a .gguf file or a Hugging Face folder)");
  auto gguf = std::make_unique<GgufFile>(GgufFile::open(path, map_mode(opts)));
  ModelConfig c = config_from_gguf(*gguf);
  return from_source(c, std::move(gguf), WeightNaming::GGUF, opts);
}

std::unique_ptr<Model> Model::from_source(const ModelConfig& config,
                                          std::unique_ptr<TensorSource> source, WeightNaming naming,
                                          const LoadOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  m->config_ = config;
  m->config_.validate();
  m->source_ = std::move(source);
  m->weights_ = bind_weights(m->config_, *m->source_, naming);
  m->inv_freq_ = m->config_.rope_inv_freq();
  m->reference_matmul_ = opts.reference_matmul;
  m->fuse_projections();
  if (opts.pool) {
    m->pool_ = opts.pool;
  } else {
    m->own_pool_ = std::make_unique<ThreadPool>(opts.n_threads > 0 ? opts.n_threads
                                                                   : ThreadPool::default_threads());
    m->pool_ = m->own_pool_.get();
  }
  if (!m->reference_matmul_) m->interleave_weights();
  return m;
}

void Model::fuse_projections() {
  // Rows of the parts, one after the other: y = x . [W0; W1; ...]^T holds each part's outputs
  // side by side. Parts share their width (bind_weights checked the shapes); each run of equal
  // dtypes becomes one matrix. A part copied into a fused matrix is not read again: its bytes
  // go back to the system where the source holds a private copy, whole 2 MB pages of them
  // (RSS of a 986 MB Q4_K_M of Qwen2.5-Coder-1.5B's shape: 1.47 -> 1.16 GB), and its data
  // pointer is cleared. Pass 1 plans the runs and sizes the arena, pass 2 copies.
  auto runs_of = [&](std::initializer_list<cpu::WeightMatrix*> parts) {
    std::vector<std::vector<cpu::WeightMatrix*>> runs;
    for (cpu::WeightMatrix* p : parts) {
      EFIM_CHECK(p->cols == (*parts.begin())->cols, "model: cannot fuse [", p->rows, ", ", p->cols,
                 "] with [.., ", (*parts.begin())->cols, "]");
      if (runs.empty() || runs.back().back()->dtype != p->dtype) runs.emplace_back();
      runs.back().push_back(p);
    }
    return runs;
  };
  auto run_bytes = [](const std::vector<cpu::WeightMatrix*>& run) {
    size_t bytes = 0;
    for (const cpu::WeightMatrix* p : run)
      bytes += static_cast<size_t>(p->rows) *
               dtype_row_bytes(p->dtype, static_cast<uint64_t>(p->cols));
    return (bytes + 63) / 64 * 64;
  };
  struct LayerRuns {
    std::vector<std::vector<cpu::WeightMatrix*>> qkv, gate_up;
  };
  std::vector<LayerRuns> plan;
  size_t total = 0;
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    LayerWeights& w = weights_.layers[l];
    LayerRuns r;
    r.qkv = runs_of({&w.wq, &w.wk, &w.wv});
    if (config_.moe_layer(static_cast<int64_t>(l))) {
      // experts: their gate and up stay in the file (no copy of most of the model)
    } else if (config_.mlp == MlpKind::Gelu) {
      r.gate_up = runs_of({&w.w_up});
    } else {
      r.gate_up = runs_of({&w.w_gate, &w.w_up});
    }
    for (const auto* runs : {&r.qkv, &r.gate_up})
      for (const auto& run : *runs)
        if (run.size() > 1) total += run_bytes(run);
    plan.push_back(std::move(r));
  }
  fused_arena_ = HugePageBuffer(total);
  size_t used = 0;
  auto fuse_run = [&](const std::vector<cpu::WeightMatrix*>& run) {
    if (run.size() == 1) return *run.front();
    cpu::WeightMatrix f = *run.front();
    f.rows = 0;
    for (const cpu::WeightMatrix* p : run) f.rows += p->rows;
    const size_t row_bytes = dtype_row_bytes(f.dtype, static_cast<uint64_t>(f.cols));
    uint8_t* data = fused_arena_.data() + used;
    used += run_bytes(run);
    size_t at = 0;
    for (cpu::WeightMatrix* p : run) {
      const size_t part = static_cast<size_t>(p->rows) * row_bytes;
      std::memcpy(data + at, p->data, part);
      at += part;
      discarded_bytes_ += source_->discard(p->data, part);
      p->data = nullptr;
    }
    f.data = data;
    return f;
  };
  fused_.clear();
  for (size_t l = 0; l < plan.size(); ++l) {
    FusedLayer f;
    for (const auto& run : plan[l].qkv) f.qkv.push_back(fuse_run(run));
    for (const auto& run : plan[l].gate_up) f.gate_up.push_back(fuse_run(run));
    const LayerWeights& w = weights_.layers[l];
    if (config_.qkv_bias) {
      f.bqkv = w.bq;
      f.bqkv.insert(f.bqkv.end(), w.bk.begin(), w.bk.end());
      f.bqkv.insert(f.bqkv.end(), w.bv.begin(), w.bv.end());
    }
    fused_.push_back(std::move(f));
  }
  EFIM_CHECK(used == total, "model: fused ", used, " bytes of weights, planned ", total);
}

void Model::interleave_weights() {
  auto rewrite = [&](cpu::WeightMatrix& w) {
    if (!cpu::can_interleave(w)) return;
    const size_t bytes = static_cast<size_t>(w.rows) * dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
    uint8_t* at = is_fused(w.data) ? const_cast<uint8_t*>(static_cast<const uint8_t*>(w.data))
                                   : source_->writable(w.data, bytes);
    if (at == nullptr) return;  // a shared mapping of the file: left as it is
    w = cpu::interleave_rows8(w, at, pool_);  // in place
  };
  for (size_t l = 0; l < fused_.size(); ++l) {
    LayerWeights& lw = weights_.layers[l];
    // A part that was not fused (a run of one) is the layer's own matrix: rewritten once, and
    // the layer's copy of it told.
    auto rewrite_part = [&](cpu::WeightMatrix& w) {
      rewrite(w);
      for (cpu::WeightMatrix* own : {&lw.wq, &lw.wk, &lw.wv, &lw.w_gate, &lw.w_up})
        if (own->data == w.data && own->rows == w.rows) *own = w;
    };
    for (cpu::WeightMatrix& w : fused_[l].qkv) rewrite_part(w);
    for (cpu::WeightMatrix& w : fused_[l].gate_up) rewrite_part(w);
    rewrite(lw.wo);
    rewrite(lw.w_down);
    for (auto* experts : {&lw.expert_gate, &lw.expert_up, &lw.expert_down})
      for (cpu::WeightMatrix& w : *experts) rewrite(w);
  }
  // The head; when it is the tied embedding, the lookup reads its rows through
  // cpu::dequantize_row, which reads the interleaved layout too.
  const bool tied = weights_.output.data == weights_.embed.data;
  rewrite(weights_.output);
  if (tied) weights_.embed = weights_.output;
  source_->seal();
}

// ---------------------------------------------------------------- ContiguousSession

ContiguousSession::ContiguousSession(Model& model, int64_t max_tokens, DType kv_type)
    : model_(model), kv_(KvCache::for_model(model.config(), max_tokens, kv_type)) {}

std::vector<float> ContiguousSession::eval(const std::vector<int32_t>& tokens, bool all_logits) {
  EFIM_CHECK(!tokens.empty(), "session: eval needs at least one token");
  const int64_t end = n_past_ + static_cast<int64_t>(tokens.size());
  EFIM_CHECK(end <= kv_.n_slots(), "session: ", end, " tokens exceed the context of ",
             kv_.n_slots());
  Batch b;
  std::vector<int32_t> slots(static_cast<size_t>(end));
  std::iota(slots.begin(), slots.end(), 0);  // slot = position
  const int32_t s = b.add_sequence(std::move(slots));
  for (size_t i = 0; i < tokens.size(); ++i)
    b.add_token(tokens[i], static_cast<int32_t>(n_past_ + static_cast<int64_t>(i)), s,
                all_logits || i + 1 == tokens.size());
  std::vector<float> logits = model_.forward(b, kv_);
  n_past_ = end;
  return logits;
}

void ContiguousSession::truncate(int64_t n) {
  EFIM_CHECK(n >= 0 && n <= n_past_, "session: truncate to ", n, " outside [0, ", n_past_, "]");
  n_past_ = n;
}

}  // namespace efim
