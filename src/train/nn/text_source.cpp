#include "train/nn/text_source.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"
#include "tokenizer/tokenizer.h"

namespace efim::train {

namespace fs = std::filesystem;

TextBatchSource::TextBatchSource(const Tokenizer& tok, const TextSourceOptions& opts)
    : o_(opts), rng_(opts.seed) {
  EFIM_CHECK(o_.B > 0 && o_.T > 0, "train: text source batch ", o_.B, " x ", o_.T,
             " must be positive");
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(o_.path, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(o_.path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
  } else {
    EFIM_CHECK(fs::is_regular_file(o_.path, ec), "train: data path '", o_.path,
               "' is neither a file nor a folder");
    files.emplace_back(o_.path);
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    if (fs::file_size(f, ec) > o_.max_file_bytes) continue;
    const std::vector<int32_t> ids = tok.encode(read_file(f.string()));
    stream_.insert(stream_.end(), ids.begin(), ids.end());
    if (o_.eot >= 0) stream_.push_back(o_.eot);
    ++files_;
  }
  const int64_t n = static_cast<int64_t>(stream_.size());
  EFIM_CHECK(n >= o_.T + 1, "train: data at '", o_.path, "' has ", n, " tokens in ", files_,
             " files, fewer than one sequence of ", o_.T + 1);
  for (int64_t s = 0; s + o_.T + 1 <= n; s += o_.T) order_.push_back(s);
  std::shuffle(order_.begin(), order_.end(), rng_);
}

void TextBatchSource::next(TokenBatch& batch) {
  batch.resize(o_.B, o_.T);
  for (int64_t r = 0; r < o_.B; ++r) {
    if (next_ == order_.size()) {
      std::shuffle(order_.begin(), order_.end(), rng_);
      next_ = 0;
      ++passes_;
    }
    const int32_t* w = stream_.data() + order_[next_++];
    std::copy(w, w + o_.T, batch.inputs.begin() + r * o_.T);
    std::copy(w + 1, w + o_.T + 1, batch.targets.begin() + r * o_.T);
  }
}

std::string TextBatchSource::describe() const {
  return str("text '", o_.path, "': ", files_, " files, ", stream_.size(), " tokens, ",
             order_.size(), " sequences of ", o_.T, " (", passes_, " full passes so far)");
}

}  // namespace efim::train
