#include "app/loaded.h"

#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"
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

LoadedModel load_model(const std::string& path, int n_threads) {
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
