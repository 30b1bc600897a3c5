// safetensors writer: one file, or HF-style shards plus model.safetensors.index.json.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "format/safetensors.h"

namespace efim {

namespace fs = std::filesystem;

namespace {

// Checks names, dtypes and that each byte count matches its shape.
void validate(const std::vector<const SafetensorsTensor*>& tensors) {
  std::set<std::string> names;
  for (const auto* t : tensors) {
    const std::string w = str("safetensors writer: tensor '", t->name, "'");
    EFIM_CHECK(!t->name.empty() && t->name != "__metadata__", w, " has a reserved or empty name");
    EFIM_CHECK(names.insert(t->name).second, w, " appears twice");
    safetensors_dtype_name(t->dtype);  // throws for quantized dtypes
    uint64_t numel = 1;
    for (auto d : t->shape) {
      EFIM_CHECK(d >= 0, w, " has negative dim ", d);
      auto n = static_cast<uint64_t>(d);
      EFIM_CHECK(n == 0 || numel <= std::numeric_limits<int64_t>::max() / n, w,
                 " has too many elements");
      numel *= n;
    }
    uint64_t want = numel * static_cast<uint64_t>(dtype_info(t->dtype).block_bytes);
    EFIM_CHECK(t->bytes.size() == want, w, " of dtype ", dtype_name(t->dtype), " needs ", want,
               " bytes, got ", t->bytes.size());
  }
}

void write_one(const std::string& path, const std::vector<const SafetensorsTensor*>& tensors,
               const std::map<std::string, std::string>& metadata) {
  validate(tensors);
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* t : tensors) {
    h[t->name] = {{"dtype", safetensors_dtype_name(t->dtype)},
                  {"shape", t->shape},
                  {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as HF writes
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  EFIM_CHECK(out, "safetensors writer: cannot create '", path, "': ", std::strerror(errno));
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto* t : tensors)
    out.write(t->bytes.data(), static_cast<std::streamsize>(t->bytes.size()));
  out.flush();
  EFIM_CHECK(out.good(), "safetensors writer: error writing '", path, "'");
}

std::string shard_name(size_t i, size_t n) {
  std::ostringstream os;
  os << "model-" << std::setw(5) << std::setfill('0') << i << "-of-" << std::setw(5)
     << std::setfill('0') << n << ".safetensors";
  return os.str();
}

}  // namespace

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I8: return "I8";
    default: break;
  }
  fail("safetensors cannot hold dtype ", dtype_name(t), " (only F32, F16, BF16, I32, I8)");
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsTensor*> ptrs;
  for (const auto& t : tensors) ptrs.push_back(&t);
  write_one(path, ptrs, metadata);
}

void write_safetensors_folder(const std::string& dir,
                              const std::vector<SafetensorsTensor>& tensors,
                              uint64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  EFIM_CHECK(!ec, "safetensors writer: cannot create folder '", dir, "': ", ec.message());
  const std::map<std::string, std::string> meta = {{"format", "pt"}};  // transformers wants it
  std::vector<const SafetensorsTensor*> all;
  uint64_t total = 0;
  for (const auto& t : tensors) {
    all.push_back(&t);
    total += t.bytes.size();
  }
  validate(all);  // before writing anything
  if (max_shard_bytes == 0 || total <= max_shard_bytes) {
    write_one((fs::path(dir) / "model.safetensors").string(), all, meta);
    return;
  }
  // Greedy in the given order: a shard closes when the next tensor would overflow it; a tensor
  // larger than the limit gets a shard of its own.
  std::vector<std::vector<const SafetensorsTensor*>> shards(1);
  uint64_t in_shard = 0;
  for (const auto* t : all) {
    if (!shards.back().empty() && in_shard + t->bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += t->bytes.size();
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s + 1, shards.size());
    write_one((fs::path(dir) / name).string(), shards[s], meta);
    for (const auto* t : shards[s]) index["weight_map"][t->name] = name;
  }
  write_file((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}

}  // namespace efim
