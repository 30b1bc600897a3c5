#include "bench/infill/workload.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "base/error.h"
#include "base/mmap_file.h"

namespace efim::bench {
namespace {

// Length of the UTF-8 sequence starting at text[i], 0 when it is not a valid one (overlong
// forms, surrogates and code points above U+10FFFF are invalid, as in Python's decoder).
size_t utf8_len(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const size_t left = text.size() - i;
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (left < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return n;
}

// splitmix64: a tiny, fully specified generator (same stream everywhere).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<size_t> char_offsets(std::string_view text, std::string_view label) {
  std::vector<size_t> off;
  off.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8_len(text, i);
    EFIM_CHECK(n > 0, label, ": invalid UTF-8 at byte offset ", i, " (byte value ",
               static_cast<unsigned>(static_cast<unsigned char>(text[i])), ")");
    off.push_back(i);
    i += n;
  }
  off.push_back(text.size());
  return off;
}

bool valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8_len(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

UserDoc split_document(std::string path, std::string_view text, int rounds) {
  EFIM_CHECK(rounds >= 1, "rounds must be >= 1, got ", rounds);
  const std::vector<size_t> off = char_offsets(text, path);
  const size_t n = off.size() - 1;                 // characters
  const size_t half = n / 2;                       // H
  const size_t chunk = half / size_t(rounds + 2);  // characters per round
  EFIM_CHECK(chunk >= 1, path, ": ", n, " characters are too few for ", rounds,
             " rounds (chunk = (n/2)/(rounds+2) = 0)");
  UserDoc u;
  u.path = std::move(path);
  u.prefix = std::string(text.substr(0, off[chunk]));
  u.suffix = std::string(text.substr(off[half]));
  for (int r = 0; r < rounds; ++r) {
    const size_t end = chunk * size_t(r + 2);  // <= chunk * (rounds + 1) < H
    u.typed.emplace_back(text.substr(off[chunk], off[end] - off[chunk]));
  }
  return u;
}

Corpus scan_corpus(const Tokenizer& tok, const CorpusOptions& opts) {
  namespace fs = std::filesystem;
  EFIM_CHECK(opts.min_tokens >= 0 && opts.min_tokens <= opts.max_tokens, "document token range [",
             opts.min_tokens, ", ", opts.max_tokens, "] is empty or negative");
  EFIM_CHECK(fs::is_directory(opts.dir), "documents folder '", opts.dir, "' does not exist");
  std::vector<std::string> paths;
  std::error_code ec;
  for (fs::recursive_directory_iterator
           it(opts.dir, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".py")
      paths.push_back(it->path().string());
  }
  EFIM_CHECK(!ec, "cannot list '", opts.dir, "': ", ec.message());
  std::sort(paths.begin(), paths.end());
  Corpus c;
  c.scanned = paths.size();
  for (const auto& p : paths) {
    const std::string text = read_file(p);
    // A byte-level BPE token covers at least one byte: a file of fewer bytes than min_tokens
    // cannot qualify, and need not be tokenized.
    if (int64_t(text.size()) < opts.min_tokens) continue;
    if (!valid_utf8(text)) {
      ++c.skipped_invalid;
      continue;
    }
    const int64_t n = int64_t(tok.encode(text).size());
    if (n < opts.min_tokens || n > opts.max_tokens) continue;
    c.files.push_back(p);
    c.tokens.push_back(n);
  }
  return c;
}

std::vector<size_t> sample_indices(size_t population, size_t n, uint64_t seed) {
  EFIM_CHECK(n <= population, "cannot sample ", n, " distinct items out of ", population);
  std::vector<size_t> idx(population);
  for (size_t i = 0; i < population; ++i) idx[i] = i;
  uint64_t state = seed;
  // Partial Fisher-Yates: position i gets a uniform pick from [i, population). The modulo
  // bias (< population / 2^64) is irrelevant here.
  for (size_t i = 0; i < n; ++i) {
    size_t j = i + size_t(splitmix64(state) % uint64_t(population - i));
    std::swap(idx[i], idx[j]);
  }
  idx.resize(n);
  return idx;
}

Workload build_workload(const Tokenizer& tok, const WorkloadOptions& opts) {
  EFIM_CHECK(opts.users >= 1, "users must be >= 1, got ", opts.users);
  Corpus c = scan_corpus(tok, opts.corpus);
  EFIM_CHECK(size_t(opts.users) <= c.files.size(), "only ", c.files.size(), " of ", c.scanned,
             " *.py files under '", opts.corpus.dir, "' have between ", opts.corpus.min_tokens,
             " and ", opts.corpus.max_tokens, " tokens; ", opts.users,
             " users need one each (widen the document range or use fewer users)");
  Workload w;
  w.eligible_files = c.files.size();
  w.scanned_files = c.scanned;
  for (size_t i : sample_indices(c.files.size(), size_t(opts.users), opts.seed)) {
    UserDoc u = split_document(c.files[i], read_file(c.files[i]), opts.rounds);
    u.n_tokens = c.tokens[i];
    w.users.push_back(std::move(u));
  }
  return w;
}

}  // namespace efim::bench
