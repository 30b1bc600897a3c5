// Shard files: writer, bounds-checked reader (format in shards.h).
#include "train/data/shards.h"

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace efim::train {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {  // little-endian host (x86-64, aarch64)
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

std::string shard_name(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05zu.bin", i);
  return buf;
}

}  // namespace

// ---- ShardWriter ----------------------------------------------------------------------

ShardWriter::ShardWriter(std::string dir, ShardVocab vocab, ShardWriterOptions opts)
    : dir_(std::move(dir)), vocab_(vocab), opts_(std::move(opts)) {
  EFIM_CHECK(vocab_.vocab_size > 0, "shard writer: vocab_size ", vocab_.vocab_size, " <= 0");
  EFIM_CHECK(opts_.shard_tokens > 0, "shard writer: shard_tokens must be > 0");
  token_bytes_ = vocab_.vocab_size <= 65536 ? 2 : 4;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  EFIM_CHECK(!ec, "cannot create shard directory '", dir_, "': ", ec.message());
  offsets_ = {0};
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::add(std::span<const int32_t> tokens) {
  EFIM_CHECK(!finished_, "shard writer: add() after finish()");
  EFIM_CHECK(!tokens.empty(), "shard writer: empty sample");
  for (int32_t id : tokens) {
    EFIM_CHECK(id >= 0 && id < vocab_.vocab_size, "shard writer: token id ", id,
               " outside [0, ", vocab_.vocab_size, ")");
    if (token_bytes_ == 2)
      put<uint16_t>(tokens_, static_cast<uint16_t>(id));
    else
      put<uint32_t>(tokens_, static_cast<uint32_t>(id));
  }
  offsets_.push_back(offsets_.back() + tokens.size());
  total_samples_ += 1;
  total_tokens_ += tokens.size();
  if (offsets_.back() >= opts_.shard_tokens) close_shard();
}

void ShardWriter::close_shard() {
  const uint64_t n_samples = offsets_.size() - 1, n_tokens = offsets_.back();
  if (n_samples == 0) return;
  std::vector<uint8_t> head;
  head.insert(head.end(), kShardMagic, kShardMagic + 8);
  put<uint32_t>(head, kShardVersion);
  put<uint32_t>(head, token_bytes_);
  put<uint64_t>(head, n_samples);
  put<uint64_t>(head, n_tokens);
  for (int32_t v : {vocab_.vocab_size, vocab_.eos, vocab_.fim_prefix, vocab_.fim_suffix,
                    vocab_.fim_middle})
    put<int32_t>(head, v);
  head.resize(kShardHeaderBytes, 0);
  tokens_.resize(pad8(tokens_.size()), 0);
  std::vector<uint8_t> offs;
  for (uint64_t o : offsets_) put<uint64_t>(offs, o);

  std::string name = shard_name(shards_.size());
  std::string path = (std::filesystem::path(dir_) / name).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  EFIM_CHECK(f, "cannot open '", path, "' for writing");
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            std::fwrite(tokens_.data(), 1, tokens_.size(), f) == tokens_.size() &&
            std::fwrite(offs.data(), 1, offs.size(), f) == offs.size();
  ok = (std::fclose(f) == 0) && ok;
  EFIM_CHECK(ok, "write error on '", path, "'");
  shards_.push_back({name, n_samples, n_tokens});
  tokens_.clear();
  offsets_ = {0};
}

void ShardWriter::finish() {
  if (finished_) return;
  close_shard();
  finished_ = true;
  nlohmann::json index;
  index["format"] = "efim-shards";
  index["version"] = kShardVersion;
  index["samples"] = total_samples_;
  index["tokens"] = total_tokens_;
  index["token_bytes"] = token_bytes_;
  index["vocab"] = {{"vocab_size", vocab_.vocab_size}, {"eos", vocab_.eos},
                    {"fim_prefix", vocab_.fim_prefix}, {"fim_suffix", vocab_.fim_suffix},
                    {"fim_middle", vocab_.fim_middle}};
  index["shards"] = nlohmann::json::array();
  for (const auto& s : shards_)
    index["shards"].push_back({{"file", s.file}, {"samples", s.samples}, {"tokens", s.tokens}});
  index["build"] = nlohmann::json::parse(opts_.index_extra_json);
  write_file((std::filesystem::path(dir_) / "index.json").string(), index.dump(2) + "\n");
}

// ---- Shard ----------------------------------------------------------------------------

Shard::Shard(const std::string& path) : file_(path) {
  const uint8_t* p = file_.data();
  const uint64_t size = file_.size();
  EFIM_CHECK(size >= kShardHeaderBytes, "shard '", path, "': ", size,
             " bytes, shorter than the ", kShardHeaderBytes, "-byte header (truncated?)");
  EFIM_CHECK(std::memcmp(p, kShardMagic, 8) == 0, "shard '", path,
             "': bad magic (expected \"EFIMSHRD\")");
  uint32_t version = get<uint32_t>(p + 8);
  EFIM_CHECK(version == kShardVersion, "shard '", path, "': version ", version,
             ", this build reads version ", kShardVersion);
  token_bytes_ = get<uint32_t>(p + 12);
  EFIM_CHECK(token_bytes_ == 2 || token_bytes_ == 4, "shard '", path, "': token_bytes ",
             token_bytes_, " (expected 2 or 4)");
  n_samples_ = get<uint64_t>(p + 16);
  n_tokens_ = get<uint64_t>(p + 24);
  vocab_ = {get<int32_t>(p + 32), get<int32_t>(p + 36), get<int32_t>(p + 40),
            get<int32_t>(p + 44), get<int32_t>(p + 48)};
  EFIM_CHECK(vocab_.vocab_size > 0, "shard '", path, "': vocab_size ", vocab_.vocab_size);
  // Sizes first in 128-bit arithmetic so that huge counts cannot wrap around.
  const unsigned __int128 tok_bytes = static_cast<unsigned __int128>(n_tokens_) * token_bytes_;
  const unsigned __int128 want = kShardHeaderBytes + (tok_bytes + 7) / 8 * 8 +
                                 (static_cast<unsigned __int128>(n_samples_) + 1) * 8;
  EFIM_CHECK(want == size, "shard '", path, "': n_samples ", n_samples_, " and n_tokens ",
             n_tokens_, " need ", static_cast<uint64_t>(want > UINT64_MAX ? UINT64_MAX : want),
             " bytes, the file has ", size, " (truncated or corrupt)");
  tokens_ = p + kShardHeaderBytes;
  offsets_ = tokens_ + pad8(n_tokens_ * token_bytes_);
  EFIM_CHECK(offset(0) == 0, "shard '", path, "': offsets[0] = ", offset(0), ", expected 0");
  for (uint64_t i = 0; i < n_samples_; ++i) {
    uint64_t a = offset(i), b = offset(i + 1);
    EFIM_CHECK(b > a && b <= n_tokens_, "shard '", path, "': offsets[", i + 1, "] = ", b,
               " after offsets[", i, "] = ", a, " (must increase and stay <= n_tokens ",
               n_tokens_, ")");
  }
  EFIM_CHECK(offset(n_samples_) == n_tokens_, "shard '", path, "': offsets[n_samples] = ",
             offset(n_samples_), ", expected n_tokens ", n_tokens_);
  for (uint64_t i = 0; i < n_tokens_; ++i) {
    uint32_t id = token_bytes_ == 2 ? get<uint16_t>(tokens_ + 2 * i) : get<uint32_t>(tokens_ + 4 * i);
    EFIM_CHECK(id < static_cast<uint32_t>(vocab_.vocab_size), "shard '", path, "': token ", i,
               " has id ", id, " >= vocab_size ", vocab_.vocab_size);
  }
}

uint64_t Shard::offset(uint64_t i) const { return get<uint64_t>(offsets_ + 8 * i); }

uint64_t Shard::sample_size(uint64_t i) const {
  EFIM_CHECK(i < n_samples_, "shard sample ", i, " out of range (", n_samples_, " samples)");
  return offset(i + 1) - offset(i);
}

void Shard::append_sample(uint64_t i, std::vector<int32_t>& out) const {
  EFIM_CHECK(i < n_samples_, "shard sample ", i, " out of range (", n_samples_, " samples)");
  for (uint64_t t = offset(i), e = offset(i + 1); t < e; ++t)
    out.push_back(token_bytes_ == 2 ? get<uint16_t>(tokens_ + 2 * t)
                                    : static_cast<int32_t>(get<uint32_t>(tokens_ + 4 * t)));
}

// ---- ShardReader ----------------------------------------------------------------------

namespace {

uint64_t json_u64(const nlohmann::json& j, const char* key, const std::string& where) {
  EFIM_CHECK(j.is_object() && j.contains(key) && j[key].is_number_unsigned(), where,
             ": field '", key, "' missing or not an unsigned integer");
  return j[key].get<uint64_t>();
}

}  // namespace

ShardReader::ShardReader(const std::string& dir) : dir_(dir) {
  const std::string index_path = (std::filesystem::path(dir) / "index.json").string();
  index_json_ = read_file(index_path);
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(index_json_);
  } catch (const nlohmann::json::exception& e) {
    fail(index_path, ": not valid JSON: ", e.what());
  }
  EFIM_CHECK(index.is_object() && index.value("format", "") == "efim-shards", index_path,
             ": field 'format' is not \"efim-shards\"");
  EFIM_CHECK(json_u64(index, "version", index_path) == kShardVersion, index_path, ": version ",
             index["version"].dump(), ", expected ", kShardVersion);
  EFIM_CHECK(index.contains("shards") && index["shards"].is_array(), index_path,
             ": field 'shards' missing or not an array");
  first_sample_ = {0};
  for (const auto& s : index["shards"]) {
    EFIM_CHECK(s.is_object() && s.contains("file") && s["file"].is_string(), index_path,
               ": a shard entry has no string 'file'");
    std::string file = s["file"].get<std::string>();
    EFIM_CHECK(file.find('/') == std::string::npos && file != ".." && !file.empty(),
               index_path, ": shard file name '", file, "' must be a plain name in the folder");
    auto shard = std::make_unique<Shard>((std::filesystem::path(dir) / file).string());
    EFIM_CHECK(shard->num_samples() == json_u64(s, "samples", index_path) &&
                   shard->num_tokens() == json_u64(s, "tokens", index_path),
               index_path, ": shard '", file, "' has ", shard->num_samples(), " samples and ",
               shard->num_tokens(), " tokens, the index says ", s["samples"].dump(), " and ",
               s["tokens"].dump());
    const ShardVocab& v = shard->vocab();
    if (shards_.empty()) vocab_ = v;
    EFIM_CHECK(v.vocab_size == vocab_.vocab_size && v.eos == vocab_.eos &&
                   v.fim_prefix == vocab_.fim_prefix && v.fim_suffix == vocab_.fim_suffix &&
                   v.fim_middle == vocab_.fim_middle,
               index_path, ": shard '", file, "' has different vocabulary ids than the first");
    n_samples_ += shard->num_samples();
    n_tokens_ += shard->num_tokens();
    first_sample_.push_back(n_samples_);
    shards_.push_back(std::move(shard));
  }
  EFIM_CHECK(json_u64(index, "samples", index_path) == n_samples_ &&
                 json_u64(index, "tokens", index_path) == n_tokens_,
             index_path, ": totals ", index["samples"].dump(), " samples / ",
             index["tokens"].dump(), " tokens differ from the shards' ", n_samples_, " / ",
             n_tokens_);
}

std::pair<const Shard*, uint64_t> ShardReader::locate(uint64_t i) const {
  EFIM_CHECK(i < n_samples_, "sample ", i, " out of range (", n_samples_, " samples in '",
             dir_, "')");
  // first_sample_ is sorted: the shard is the last one whose first sample is <= i.
  auto it = std::upper_bound(first_sample_.begin(), first_sample_.end(), i);
  size_t s = static_cast<size_t>(it - first_sample_.begin()) - 1;
  return {shards_[s].get(), i - first_sample_[s]};
}

uint64_t ShardReader::sample_size(uint64_t i) const {
  auto [shard, j] = locate(i);
  return shard->sample_size(j);
}

void ShardReader::append_sample(uint64_t i, std::vector<int32_t>& out) const {
  auto [shard, j] = locate(i);
  shard->append_sample(j, out);
}

std::vector<int32_t> ShardReader::sample(uint64_t i) const {
  std::vector<int32_t> out;
  append_sample(i, out);
  return out;
}

}  // namespace efim::train
