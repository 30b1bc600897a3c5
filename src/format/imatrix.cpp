#include "format/imatrix.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/mmap_file.h"
#include "format/byte_cursor.h"
#include "format/gguf.h"

namespace efim {

namespace {

constexpr std::string_view kSums = ".in_sum2", kCounts = ".counts";

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void check_values(const std::string& label, const std::string& name,
                  std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i)
    EFIM_CHECK(std::isfinite(values[i]) && values[i] >= 0, label, ": imatrix entry ", name,
               " value ", i, " is ", values[i], " (must be finite and >= 0)");
}

// f32 data of a tensor as a vector (GGUF data need not be 4-byte aligned for us to read).
std::vector<float> f32_data(const GgufFile& f, const std::string& name, const std::string& label) {
  const std::optional<TensorView> t = f.find(name);
  EFIM_CHECK(t, label, ": imatrix tensor ", name, " is missing");
  EFIM_CHECK(t->dtype == DType::F32, label, ": imatrix tensor ", name, " is ",
             dtype_name(t->dtype), ", expected f32");
  std::vector<float> v(static_cast<size_t>(t->numel()));
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  return v;
}

ImportanceMatrix parse_gguf(const GgufFile& f, const std::string& label) {
  const GgufValue* type = f.get("general.type");
  EFIM_CHECK(type && type->as_string() == "imatrix", label,
             ": a GGUF file but not an importance matrix (general.type is ",
             type ? "\"" + type->as_string() + "\"" : std::string("absent"),
             ", expected \"imatrix\")");
  ImportanceMatrix m;
  if (const GgufValue* d = f.get("imatrix.datasets")) m.datasets = d->as_strings();
  if (const GgufValue* v = f.get("imatrix.chunk_count")) m.chunk_count = v->as_i64();
  if (const GgufValue* v = f.get("imatrix.chunk_size")) m.chunk_size = v->as_i64();
  for (const GgufTensorInfo& info : f.tensors()) {
    if (!ends_with(info.name, kSums)) {
      EFIM_CHECK(ends_with(info.name, kCounts), label, ": unexpected imatrix tensor ", info.name,
                 " (expected NAME.in_sum2 and NAME.counts)");
      const std::string base = info.name.substr(0, info.name.size() - kCounts.size());
      EFIM_CHECK(f.find(base + std::string(kSums)), label, ": imatrix tensor ", info.name,
                 " has no ", base, kSums);
      continue;
    }
    const std::string name = info.name.substr(0, info.name.size() - kSums.size());
    const std::vector<float> sums = f32_data(f, info.name, label);
    const std::vector<float> counts = f32_data(f, name + std::string(kCounts), label);
    check_values(label, name + std::string(kSums), sums);
    check_values(label, name + std::string(kCounts), counts);
    const auto n_mat = static_cast<int64_t>(counts.size());
    EFIM_CHECK(n_mat > 0 && !sums.empty() && sums.size() % counts.size() == 0, label,
               ": imatrix entry ", name, " has ", sums.size(), " sums for ", n_mat,
               " counts (expected a whole row of sums per count)");
    ImportanceMatrix::Entry e;
    e.n_mat = n_mat;
    e.values.resize(sums.size());
    const int64_t cols = static_cast<int64_t>(sums.size()) / n_mat;
    for (int64_t j = 0; j < n_mat; ++j)
      for (int64_t i = 0; i < cols; ++i)
        e.values[static_cast<size_t>(j * cols + i)] =
            counts[static_cast<size_t>(j)] > 0
                ? sums[static_cast<size_t>(j * cols + i)] / counts[static_cast<size_t>(j)]
                : 1.0f;
    m.entries.emplace(name, std::move(e));
  }
  EFIM_CHECK(!m.entries.empty(), label, ": the importance matrix has no entries");
  return m;
}

ImportanceMatrix parse_legacy(const uint8_t* bytes, size_t size, const std::string& label) {
  ByteCursor c(bytes, size, "imatrix '" + label + "'");
  ImportanceMatrix m;
  m.legacy = true;
  const auto n = c.read<int32_t>("entry count");
  EFIM_CHECK(n > 0, label, ": imatrix entry count ", n, " (expected > 0)");
  for (int32_t k = 0; k < n; ++k) {
    const auto len = c.read<int32_t>("name length");
    EFIM_CHECK(len > 0 && static_cast<size_t>(len) <= c.remaining(), label,
               ": not an importance matrix (a GGUF with general.type imatrix, or llama-imatrix's "
               "legacy .dat): entry ", k, " name length ", len, " (", c.remaining(), " bytes left)");
    std::string name(static_cast<size_t>(len), '\0');
    for (auto& ch : name) ch = static_cast<char>(c.read<uint8_t>("name"));
    const auto ncall = c.read<int32_t>("call count");
    const auto nval = c.read<int32_t>("value count");
    EFIM_CHECK(ncall >= 0 && nval > 0 && static_cast<uint64_t>(nval) * 4 <= c.remaining(), label,
               ": imatrix entry ", name, " has ", nval, " values and ", ncall, " calls (",
               c.remaining(), " bytes left)");
    ImportanceMatrix::Entry e;
    e.values.resize(static_cast<size_t>(nval));
    for (float& v : e.values) {
      v = c.read<float>("values");
      if (ncall > 0) v /= static_cast<float>(ncall);
    }
    check_values(label, name, e.values);
    EFIM_CHECK(m.entries.emplace(name, std::move(e)).second, label, ": imatrix entry ", name,
               " appears twice");
  }
  if (c.remaining() >= 4) {  // optional: the last call, then the dataset's name
    c.read<int32_t>("last call");
    if (c.remaining() >= 4) {
      const auto len = c.read<int32_t>("dataset name length");
      EFIM_CHECK(len >= 0 && static_cast<size_t>(len) <= c.remaining(), label,
                 ": imatrix dataset name length ", len, " (", c.remaining(), " bytes left)");
      std::string d(static_cast<size_t>(len), '\0');
      for (auto& ch : d) ch = static_cast<char>(c.read<uint8_t>("dataset name"));
      m.datasets.push_back(std::move(d));
    }
  }
  return m;
}

}  // namespace

ImportanceMatrix parse_imatrix(const uint8_t* bytes, size_t size, const std::string& label) {
  if (size >= 4 && std::memcmp(bytes, "GGUF", 4) == 0)
    return parse_gguf(GgufFile::parse(bytes, size, label), label);
  return parse_legacy(bytes, size, label);
}

ImportanceMatrix read_imatrix(const std::string& path) {
  MappedFile f(path);
  EFIM_CHECK(f.size() > 0, path, ": the importance matrix file is empty");
  return parse_imatrix(f.data(), f.size(), path);
}

void write_imatrix_gguf(const ImportanceMatrix& m, const std::string& path) {
  GgufWriter w;
  w.set_string("general.type", "imatrix");
  if (!m.datasets.empty()) w.set_strings("imatrix.datasets", m.datasets);
  if (m.chunk_count > 0) w.set_u32("imatrix.chunk_count", static_cast<uint32_t>(m.chunk_count));
  if (m.chunk_size > 0) w.set_u32("imatrix.chunk_size", static_cast<uint32_t>(m.chunk_size));
  for (const auto& [name, e] : m.entries) {
    const std::vector<float> counts(static_cast<size_t>(e.n_mat), 1.0f);
    w.add_tensor(name + std::string(kSums), DType::F32, {e.n_mat, e.cols()}, e.values.data(),
                 e.values.size() * sizeof(float));
    w.add_tensor(name + std::string(kCounts), DType::F32, {e.n_mat, 1}, counts.data(),
                 counts.size() * sizeof(float));
  }
  w.write(path);
}

}  // namespace efim
