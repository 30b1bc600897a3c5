#include "app/loaded.h"

#include <filesystem>

#include <fstream>
#include <memory>
#include <vector>

#include "base/error.h"
#include "base/mmap_file.h"
#include "base/progress.h"
#include "format/gguf.h"

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
                                     ConvertType type, bool progress_bar,
                                     const std::function<void(GgufWriter&)>& extra) {
  ConvertOptions opts;
  opts.input_dir = hf_dir;
  opts.output_path = gguf_path;
  opts.out_dtype = type.dtype;
  opts.more_bits_mix = type.more_bits_mix;
  Tokenizer tok = load_tokenizer(hf_dir);
  opts.tokenizer_writer = [&tok, &extra](GgufWriter& w) {
    tok.write_gguf_metadata(w);
    if (extra) extra(w);
  };
  std::unique_ptr<ProgressBar> bar;
  if (progress_bar)
    opts.progress = [&bar](int64_t done, int64_t total, const std::string& name) {
      if (!bar) bar = std::make_unique<ProgressBar>(total, ProgressOptions{"converting", "tensors"});
      bar->set_note(name);
      bar->update(static_cast<uint64_t>(done));
    };
  return convert_hf_to_gguf(opts);
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

}  // namespace efim::app
