// safetensors reader and sharded-folder loader. The JSON header is parsed strictly: duplicate
// keys, deep nesting, wrong types, unknown dtypes, sizes that disagree with the shape, offsets
// outside the data section and overlapping tensors are all errors naming the tensor and values.
#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "format/json_strict.h"

namespace efim {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MB; real headers are < 10 MB
constexpr int kMaxJsonDepth = 16;                   // real headers nest 3 deep

uint64_t get_u64(const json& j, const std::string& pre, const std::string& what) {
  EFIM_CHECK(j.is_number_unsigned(), pre, ": ", what, " must be a non-negative integer, got ",
             j.dump());
  return j.get<uint64_t>();
}

struct Entry {
  TensorView view;
  uint64_t begin = 0, end = 0;  // within the data section
};

// One tensor entry of the header; `data` is the start of the data section.
Entry parse_entry(const std::string& name, const json& e, const uint8_t* data,
                  uint64_t data_size, const std::string& pre) {
  const std::string t = str(pre, ": tensor '", name, "'");
  EFIM_CHECK(!name.empty(), pre, ": a tensor has an empty name");
  EFIM_CHECK(e.is_object(), t, " entry must be an object, got ", e.dump());
  EFIM_CHECK(e.contains("dtype") && e["dtype"].is_string(), t, " has no string \"dtype\"");
  EFIM_CHECK(e.contains("shape") && e["shape"].is_array(), t, " has no array \"shape\"");
  EFIM_CHECK(e.contains("data_offsets") && e["data_offsets"].is_array() &&
                 e["data_offsets"].size() == 2,
             t, " needs \"data_offsets\": [begin, end]");
  Entry out;
  out.view.name = name;
  const std::string dt = e["dtype"].get<std::string>();
  auto dtype = safetensors_dtype(dt);
  EFIM_CHECK(dtype.has_value(), t, " has unsupported dtype '", dt,
             "' (efim loads F32, F16, BF16, I32, I8)");
  out.view.dtype = *dtype;
  uint64_t numel = 1;
  for (const auto& d : e["shape"]) {
    uint64_t n = get_u64(d, t, "shape dim");
    EFIM_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), t,
               " shape dim ", n, " is out of range");
    EFIM_CHECK(n == 0 || numel <= std::numeric_limits<int64_t>::max() / n, t, " shape ",
               e["shape"].dump(), " has too many elements");
    numel *= n;
    out.view.shape.push_back(static_cast<int64_t>(n));
  }
  uint64_t elem = dtype_info(*dtype).block_bytes;
  EFIM_CHECK(numel <= std::numeric_limits<uint64_t>::max() / elem, t, " byte size overflows");
  out.begin = get_u64(e["data_offsets"][0], t, "data_offsets[0]");
  out.end = get_u64(e["data_offsets"][1], t, "data_offsets[1]");
  EFIM_CHECK(out.begin <= out.end, t, " data_offsets [", out.begin, ", ", out.end,
             "] are reversed");
  EFIM_CHECK(out.end <= data_size, t, " data_offsets [", out.begin, ", ", out.end,
             "] end past the data section (", data_size, " bytes)");
  EFIM_CHECK(out.end - out.begin == numel * elem, t, " holds ", out.end - out.begin,
             " bytes but shape ", e["shape"].dump(), " of ", dt, " needs ", numel * elem);
  out.view.data = data + out.begin;
  out.view.nbytes = out.end - out.begin;
  return out;
}

void check_no_overlap(std::vector<Entry>& entries, const std::string& pre) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin == e.end) continue;  // empty tensors occupy no bytes
    if (prev)
      EFIM_CHECK(prev->end <= e.begin, pre, ": tensors '", prev->view.name, "' [", prev->begin,
                 ", ", prev->end, ") and '", e.view.name, "' [", e.begin, ", ", e.end,
                 ") overlap");
    prev = &e;
  }
}

}  // namespace

std::optional<DType> safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  if (name == "I32") return DType::I32;
  if (name == "I8") return DType::I8;
  return std::nullopt;
}

json parse_json_strict(const char* begin, const char* end, const std::string& pre) {
  // Tracks the keys seen in each open object (nlohmann silently keeps the last duplicate).
  std::vector<std::set<std::string>> keys;
  int depth = 0;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        EFIM_CHECK(++depth <= kMaxJsonDepth, pre, ": JSON nests deeper than ", kMaxJsonDepth);
        if (ev == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        --depth;
        break;
      case json::parse_event_t::array_end: --depth; break;
      case json::parse_event_t::key:
        EFIM_CHECK(keys.back().insert(parsed.get<std::string>()).second, pre,
                   ": duplicate JSON key \"", parsed.get<std::string>(), "\"");
        break;
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    fail(pre, ": invalid JSON: ", e.what());
  }
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* bytes, size_t size,
                                                        const std::string& label) {
  const std::string pre = str("safetensors '", label, "'");
  EFIM_CHECK(size >= 8, pre, ": file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);  // little-endian u64
  EFIM_CHECK(n <= size - 8, pre, ": header length ", n, " runs past the end of the file (size ",
             size, ")");
  EFIM_CHECK(n <= kMaxHeaderBytes, pre, ": header length ", n, " exceeds the ", kMaxHeaderBytes,
             "-byte limit");
  auto* text = reinterpret_cast<const char*>(bytes + 8);
  json header = parse_json_strict(text, text + n, pre + " header");
  EFIM_CHECK(header.is_object(), pre, ": header must be a JSON object, got ", header.type_name());

  auto f = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  f->label_ = label;
  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      EFIM_CHECK(e.is_object(), pre, ": __metadata__ must be an object, got ", e.type_name());
      for (const auto& [k, v] : e.items()) {
        EFIM_CHECK(v.is_string(), pre, ": __metadata__ value of '", k, "' must be a string, got ",
                   v.dump());
        f->metadata_.emplace(k, v.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(name, e, data, data_size, pre));
  }
  check_no_overlap(entries, pre);  // also puts tensors in file order
  for (auto& e : entries) {
    f->index_.emplace(e.view.name, f->tensors_.size());
    f->tensors_.push_back(std::move(e.view));
  }
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, MapMode mode) {
  MappedFile mapped(path, mode);
  auto f = parse(mapped.data(), mapped.size(), path);
  f->file_ = std::move(mapped);  // the mapping's address is unchanged by the move
  return f;
}

std::vector<std::string> SafetensorsFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& t : tensors_) names.push_back(t.name);
  return names;
}

std::optional<TensorView> SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return tensors_[it->second];
}

size_t SafetensorsFile::discard(const void* p, size_t n) {
  return file_.discard(static_cast<const uint8_t*>(p), n);  // bounds-checked there
}

namespace {

// weight_map of an index file: tensor name -> shard file name (plain names in `dir` only).
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  const std::string pre = str("safetensors index '", path, "'");
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  EFIM_CHECK(!ec, pre, ": cannot stat: ", ec.message());
  EFIM_CHECK(size <= kMaxHeaderBytes, pre, ": ", size, " bytes exceeds the ", kMaxHeaderBytes,
             "-byte limit");
  std::string text = read_file(path);
  json j = parse_json_strict(text.data(), text.data() + text.size(), pre);
  EFIM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), pre,
             ": needs an object \"weight_map\"");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    EFIM_CHECK(file.is_string(), pre, ": weight_map['", name, "'] must be a file name, got ",
               file.dump());
    auto f = file.get<std::string>();
    EFIM_CHECK(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
                   f.find('\\') == std::string::npos,
               pre, ": weight_map['", name, "'] = '", f, "' is not a plain file name");
    map.emplace(name, f);
  }
  return map;
}

}  // namespace

std::unique_ptr<SafetensorsFolder> SafetensorsFolder::open(const std::string& dir, MapMode mode) {
  auto folder = std::unique_ptr<SafetensorsFolder>(new SafetensorsFolder());
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (!fs::exists(index_path)) {
    EFIM_CHECK(fs::exists(single_path), "safetensors folder '", dir,
               "': has neither model.safetensors nor model.safetensors.index.json");
    folder->shards_.push_back(SafetensorsFile::open(single_path.string(), mode));
    for (const auto& n : folder->shards_[0]->tensor_names()) {
      folder->where_.emplace(n, 0);
      folder->names_.push_back(n);
    }
    return folder;
  }
  const std::string pre = str("safetensors index '", index_path.string(), "'");
  auto weight_map = read_weight_map(index_path.string());
  std::set<std::string> files;  // sorted: model-00001-of-n first
  for (const auto& [name, file] : weight_map) files.insert(file);
  std::map<std::string, size_t> shard_of_file;
  std::vector<std::string> shard_files;
  for (const auto& file : files) {
    const fs::path p = fs::path(dir) / file;
    EFIM_CHECK(fs::is_regular_file(p), pre, ": names shard '", file, "' which does not exist");
    shard_of_file.emplace(file, folder->shards_.size());
    shard_files.push_back(file);
    folder->shards_.push_back(SafetensorsFile::open(p.string(), mode));
  }
  for (size_t s = 0; s < folder->shards_.size(); ++s)
    for (const auto& n : folder->shards_[s]->tensor_names()) {
      auto [it, fresh] = folder->where_.emplace(n, s);
      EFIM_CHECK(fresh, pre, ": tensor '", n, "' is in both shard '", shard_files[it->second],
                 "' and shard '", shard_files[s], "'");
      folder->names_.push_back(n);
    }
  for (const auto& [name, file] : weight_map) {
    auto it = folder->where_.find(name);
    size_t want = shard_of_file.at(file);
    if (it == folder->where_.end() || it->second != want)
      fail(pre, ": maps tensor '", name, "' to shard '", file, "' but that shard has no such tensor",
           it == folder->where_.end() ? "" : str(" (it is in '", shard_files[it->second], "')"));
  }
  return folder;
}

std::vector<std::string> SafetensorsFolder::tensor_names() const { return names_; }

std::optional<TensorView> SafetensorsFolder::find(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return std::nullopt;
  return shards_[it->second]->find(name);
}

size_t SafetensorsFolder::discard(const void* p, size_t n) {
  for (const auto& shard : shards_)  // only the shard whose mapping holds the range releases
    if (const size_t released = shard->discard(p, n)) return released;
  return 0;
}

}  // namespace efim
