#include "app/loaded.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <fstream>
#include <memory>
#include <vector>

#include "base/error.h"
#include "base/mmap_file.h"
#include "base/progress.h"
#include "format/gguf.h"
#include "format/safetensors.h"

namespace efim::app {

bool is_gguf_path(const std::string& path) {
  return std::filesystem::is_regular_file(path) && path.size() >= 5 &&
         path.compare(path.size() - 5, 5, ".gguf") == 0;
}

Tokenizer load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  if (is_gguf_path(path)) return Tokenizer::from_gguf(GgufFile::open(path));
  if (fs::is_regular_file(path)) return Tokenizer::from_json_file(path);  // a tokenizer.json
  fs::path json = fs::path(path) / "tokenizer.json";
  EFIM_CHECK(fs::is_regular_file(json), "'", path,
             "' is neither a .gguf file, a tokenizer.json nor a folder with tokenizer.json");
  return Tokenizer::from_json_file(json.string());
}

ConvertResult convert_folder_to_gguf(const std::string& hf_dir, const std::string& gguf_path,
                                     const FolderConvertOptions& o) {
  ConvertOptions opts;
  opts.input_dir = hf_dir;
  opts.output_path = gguf_path;
  opts.file_type = o.type;
  const bool from_gguf = is_gguf_path(hf_dir);  // its tokenizer metadata is copied as it is
  Tokenizer tok = from_gguf ? Tokenizer() : load_tokenizer(hf_dir);
  opts.tokenizer_writer = [&tok, &o, from_gguf](GgufWriter& w) {
    if (!from_gguf) tok.write_gguf_metadata(w);
    if (o.extra) o.extra(w);
  };
  ImportanceMatrix imatrix;
  if (!o.imatrix_path.empty()) {
    imatrix = read_imatrix(o.imatrix_path);
    opts.imatrix = &imatrix;
    opts.imatrix_label = std::filesystem::path(o.imatrix_path).filename().string();
  }
  std::unique_ptr<ProgressBar> bar;
  if (o.progress_bar)
    opts.progress = [&bar](int64_t done, int64_t total, const std::string& name) {
      if (!bar) bar = std::make_unique<ProgressBar>(total, ProgressOptions{"converting", "tensors"});
      bar->set_note(name);
      bar->update(static_cast<uint64_t>(done));
    };
  ConvertResult r = from_gguf ? quantize_gguf(opts) : convert_hf_to_gguf(opts);
  if (opts.imatrix) {
    bar.reset();
    std::printf("importance matrix %s (%zu entries%s%s): %lld matrices weighted", o.imatrix_path.c_str(),
                imatrix.entries.size(), imatrix.legacy ? ", legacy format" : "",
                imatrix.datasets.empty() ? "" : (", dataset " + imatrix.datasets[0]).c_str(),
                static_cast<long long>(r.imatrix_used));
    if (!r.imatrix_missing.empty()) {
      std::printf(", %zu without an entry (quantized as without one):", r.imatrix_missing.size());
      for (const std::string& n : r.imatrix_missing) std::printf(" %s", n.c_str());
    }
    std::printf("\n");
  }
  return r;
}

namespace {

// Weight files of a model path: the .gguf itself, or the folder's *.safetensors.
std::vector<std::filesystem::path> weight_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (fs::is_regular_file(path)) {
    files.emplace_back(path);
  } else if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  return files;
}

// Reads large weight files once, with a progress bar, so that the page cache holds them before
// the model maps them (a cold multi-GB load otherwise stalls silently in the first forward).
void preload_with_progress(const std::string& path) {
  constexpr uint64_t kMinBytes = 256ull << 20;
  uint64_t total = 0;
  auto files = weight_files(path);
  for (const auto& f : files) total += std::filesystem::file_size(f);
  if (total < kMinBytes) return;
  ProgressBar bar(total, ProgressOptions{"loading", "B"});
  std::vector<char> buf(8u << 20);
  uint64_t done = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
      done += static_cast<uint64_t>(in.gcount());
      bar.update(done);
    }
  }
}

}  // namespace

LoadedModel load_model(const std::string& path, int n_threads) {
  preload_with_progress(path);
  LoadOptions opts;
  opts.n_threads = n_threads;
  auto model = Model::load(path, opts);
  return LoadedModel{std::move(model), load_tokenizer(path)};
}

namespace {

// llama.cpp's llama_ftype values (general.file_type) and their names.
std::string ftype_name(uint64_t ftype) {
  static const std::map<uint64_t, const char*> kNames = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},    {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},   {25, "IQ4_NL"}, {30, "IQ4_XS"}, {32, "BF16"}};
  auto it = kNames.find(ftype);
  return it == kNames.end() ? str("ftype ", ftype) : it->second;
}

}  // namespace

std::unique_ptr<Model> load_draft_model(const std::string& path, LoadedModel& target) {
  const Tokenizer tok = load_tokenizer(path);
  const Tokenizer& want = target.tokenizer;
  // Sizes may differ by padding entries (a GGUF lists one token per embedding row: Qwen2.5-Coder
  // 0.5B 151,936, 7B 152,064); llama.cpp allows 128 more or fewer, and so does efim.
  const int32_t common = std::min(tok.vocab_size(), want.vocab_size());
  EFIM_CHECK(std::abs(tok.vocab_size() - want.vocab_size()) <= 128, "--draft-model ", path,
             ": its tokenizer has ", tok.vocab_size(), " tokens, the model's ", want.vocab_size(),
             " (at most 128 apart)");
  for (int32_t id = 0; id < common; ++id)
    EFIM_CHECK(tok.token_text(id) == want.token_text(id), "--draft-model ", path, ": token ", id,
               " is '", tok.token_text(id), "', the model's '", want.token_text(id),
               "' (a draft model must share the model's tokenizer)");
  preload_with_progress(path);
  LoadOptions opts;
  opts.pool = &target.model->pool();
  return Model::load(path, opts);
}

ModelCard model_card(const std::string& path, const Model& model) {
  ModelCard card;
  card.family = std::string(arch_name(model.config().arch));
  std::error_code ec;
  const bool gguf = is_gguf_path(path);
  card.format = gguf ? "gguf" : "safetensors";
  std::unique_ptr<TensorSource> src;
  if (gguf) {
    auto f = std::make_unique<GgufFile>(GgufFile::open(path));
    if (const GgufValue* t = f->get("general.file_type")) card.quantization = ftype_name(t->as_u64());
    src = std::move(f);
  } else {
    src = SafetensorsFolder::open(path);
  }
  // Parameters, and the dtype holding most matrix bytes when the file does not name its type.
  std::map<DType, uint64_t> bytes;
  for (const std::string& name : src->tensor_names()) {
    const auto t = src->find(name);
    if (!t) continue;
    card.n_params += t->numel();
    if (t->shape.size() >= 2) bytes[t->dtype] += t->nbytes;
  }
  if (card.quantization.empty() && !bytes.empty()) {
    auto most = std::max_element(bytes.begin(), bytes.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    for (char c : dtype_name(most->first)) card.quantization += char(std::toupper(uint8_t(c)));
  }
  const std::filesystem::path p(path);
  if (std::filesystem::is_regular_file(p, ec)) {
    card.file_bytes = int64_t(std::filesystem::file_size(p, ec));
  } else {
    for (const auto& e : std::filesystem::directory_iterator(p, ec))
      if (e.is_regular_file(ec)) card.file_bytes += int64_t(e.file_size(ec));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) card.modified_unix = int64_t(st.st_mtime);
  return card;
}

std::string text_argument(const std::string& text, const std::string& file, const char* what) {
  EFIM_CHECK(text.empty() != file.empty(), "give the ", what, " either as text or as --",
             what, "-file, not both and not neither");
  return file.empty() ? text : read_file(file);
}

std::vector<int32_t> parse_token_ids(const std::string& s, int32_t vocab) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == ',' || s[i] == '\n' || s[i] == '\t') {
      ++i;
      continue;
    }
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(s.substr(i, 20), &used);
    } catch (const std::exception&) {
      fail("token ids: expected a number at offset ", i, " of '", s.substr(i, 20), "'");
    }
    EFIM_CHECK(v >= 0 && v < vocab, "token id ", v, " outside the vocabulary [0, ", vocab, ")");
    ids.push_back(static_cast<int32_t>(v));
    i += used;
  }
  return ids;
}

SpeculativeOptions speculative_options(const std::string& mode_arg, int draft_min, int draft_max,
                                       bool have_draft_model) {
  const std::string mode = !mode_arg.empty() ? mode_arg : have_draft_model ? "draft" : "off";
  EFIM_CHECK(mode == "ngram" || mode == "off" || mode == "draft" || mode == "ngram+draft",
             "--speculative must be off, ngram, draft or ngram+draft, got '", mode, "'");
  const bool uses_model = mode == "draft" || mode == "ngram+draft";
  EFIM_CHECK(!uses_model || have_draft_model, "--speculative ", mode, " needs --draft-model");
  EFIM_CHECK(uses_model || !have_draft_model || mode == "off", "--draft-model is given but "
             "--speculative ", mode, " does not use it (give draft or ngram+draft)");
  EFIM_CHECK(draft_min >= 1 && draft_max >= draft_min && draft_max <= 64, "--draft-min ",
             draft_min, " and --draft-max ", draft_max, " must satisfy 1 <= min <= max <= 64");
  SpeculativeOptions o;
  o.enabled = mode != "off";
  o.ngram = mode == "ngram" || mode == "ngram+draft";
  o.min_draft = draft_min;
  o.max_draft = draft_max;
  o.start_draft = std::clamp(4, draft_min, draft_max);
  return o;
}

}  // namespace efim::app
