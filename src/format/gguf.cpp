// GGUF reader. Every count, length, offset and size is checked against the bytes that remain
// before anything is allocated or dereferenced; errors name the field, the offset and the values.
#include "format/gguf.h"

#include <algorithm>
#include <limits>
#include <set>

#include "base/error.h"
#include "format/byte_cursor.h"

namespace efim {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// Metadata values are widened to ~56-byte GgufValues, so a file of 1-byte u8 array items could
// ask for ~56x its size in memory; this bounds the total (real vocabularies hold < 1M values).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 25;

// Smallest encoding of one value of `t`, used to reject counts the remaining bytes cannot hold.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: return 8;  // u64 length
    case GgufType::ARRAY: return 12;  // u32 element type + u64 count
  }
  return 1;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }  // a is a power of 2

struct Parsed {
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::map<std::string, GgufValue> kv;
  std::vector<std::string> kv_order;
  std::vector<GgufTensorInfo> infos;
};

class Parser {
 public:
  Parser(const uint8_t* bytes, size_t size, const std::string& label)
      : c_(bytes, size, str("gguf '", label, "'")) {}

  Parsed run() {
    uint64_t n_tensors = 0, n_kv = 0;
    read_header(n_tensors, n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) read_kv(i);
    read_alignment();
    std::set<std::string> names;
    for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(i, names);
    check_layout();
    return std::move(p_);
  }

 private:
  const std::string& pre() const { return c_.prefix(); }

  void read_header(uint64_t& n_tensors, uint64_t& n_kv) {
    c_.need(4, "magic");
    auto magic = c_.read<uint32_t>("magic");
    if (magic != 0x46554747u)  // "GGUF" read as little-endian u32
      fail(pre(), ": bad magic 0x", std::hex, magic, std::dec, " (expected \"GGUF\" = 0x46554747)");
    p_.version = c_.read<uint32_t>("version");
    EFIM_CHECK(p_.version == 2 || p_.version == 3, pre(), ": unsupported version ", p_.version,
               " (supported: 2, 3)");
    n_tensors = c_.read<uint64_t>("tensor count");
    n_kv = c_.read<uint64_t>("metadata count");
    // Smallest KV: u64 key length + 1-byte key + u32 type + 1-byte value = 14 bytes. Smallest
    // tensor info: u64 name length + 1-byte name + u32 n_dims + u32 type + u64 offset = 25.
    uint64_t left = c_.remaining();
    EFIM_CHECK(n_kv <= left / 14, pre(), ": metadata count ", n_kv,
               " is impossible: the remaining ", left, " bytes hold at most ", left / 14);
    EFIM_CHECK(n_tensors <= left / 25, pre(), ": tensor count ", n_tensors,
               " is impossible: the remaining ", left, " bytes hold at most ", left / 25);
    EFIM_CHECK(n_kv * 14 + n_tensors * 25 <= left, pre(), ": ", n_kv, " metadata entries and ",
               n_tensors, " tensors cannot fit in the remaining ", left, " bytes");
  }

  GgufType read_type(const std::string& what) {
    auto t = c_.read<uint32_t>(what);
    EFIM_CHECK(t <= static_cast<uint32_t>(GgufType::F64), pre(), ": ", what, " ", t,
               " at offset ", c_.pos() - 4, " is not a GGUF value type (0..12)");
    return static_cast<GgufType>(t);
  }

  void read_kv(uint64_t i) {
    std::string key = c_.read_string(str("metadata key #", i));
    EFIM_CHECK(!key.empty(), pre(), ": metadata key #", i, " is empty");
    EFIM_CHECK(!p_.kv.count(key), pre(), ": duplicate metadata key '", key, "'");
    GgufType type = read_type(str("type of metadata key '", key, "'"));
    GgufValue value = read_value(type, key, 0);
    p_.kv.emplace(key, std::move(value));
    p_.kv_order.push_back(std::move(key));
  }

  // `level` = number of arrays enclosing this value.
  GgufValue read_value(GgufType type, const std::string& key, int level) {
    const std::string what = str("value of '", key, "'");
    switch (type) {
      case GgufType::U8: return {type, uint64_t{c_.read<uint8_t>(what)}};
      case GgufType::U16: return {type, uint64_t{c_.read<uint16_t>(what)}};
      case GgufType::U32: return {type, uint64_t{c_.read<uint32_t>(what)}};
      case GgufType::U64: return {type, c_.read<uint64_t>(what)};
      case GgufType::I8: return {type, int64_t{c_.read<int8_t>(what)}};
      case GgufType::I16: return {type, int64_t{c_.read<int16_t>(what)}};
      case GgufType::I32: return {type, int64_t{c_.read<int32_t>(what)}};
      case GgufType::I64: return {type, c_.read<int64_t>(what)};
      case GgufType::F32: return {type, double{c_.read<float>(what)}};
      case GgufType::F64: return {type, c_.read<double>(what)};
      case GgufType::BOOL: {
        auto b = c_.read<uint8_t>(what);
        EFIM_CHECK(b <= 1, pre(), ": bool ", what, " at offset ", c_.pos() - 1,
                   " must be 0 or 1, got ", int{b});
        return {type, b == 1};
      }
      case GgufType::STRING: return {type, c_.read_string(what)};
      case GgufType::ARRAY: return read_array(key, level + 1);
    }
    fail(pre(), ": ", what, " has unknown type ", static_cast<uint32_t>(type));
  }

  GgufValue read_array(const std::string& key, int level) {
    EFIM_CHECK(level <= kGgufMaxDepth, pre(), ": array '", key, "' nests ", level,
               " levels deep (limit ", kGgufMaxDepth, ")");
    GgufType elem = read_type(str("element type of array '", key, "'"));
    uint64_t n = c_.read<uint64_t>(str("length of array '", key, "'"));
    uint64_t fits = c_.remaining() / min_encoded_size(elem);
    EFIM_CHECK(n <= fits, pre(), ": array '", key, "' claims ", n, " ", gguf_type_name(elem),
               " items but the remaining ", c_.remaining(), " bytes hold at most ", fits);
    n_values_ += n;
    EFIM_CHECK(n_values_ <= kMaxMetadataValues, pre(), ": metadata holds more than ",
               kMaxMetadataValues, " values (array '", key, "' has ", n, ")");
    GgufArray arr;
    arr.elem_type = elem;
    arr.items.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) arr.items.push_back(read_value(elem, key, level));
    return {GgufType::ARRAY, std::move(arr)};
  }

  void read_alignment() {
    auto it = p_.kv.find("general.alignment");
    if (it == p_.kv.end()) return;
    const GgufValue& v = it->second;
    EFIM_CHECK(v.type == GgufType::U32, pre(), ": general.alignment must be u32, got ",
               gguf_type_name(v.type));
    uint64_t a = v.as_u64();
    EFIM_CHECK(a != 0 && (a & (a - 1)) == 0, pre(), ": general.alignment ", a,
               " is not a nonzero power of two");
    p_.alignment = a;
  }

  void read_tensor_info(uint64_t i, std::set<std::string>& names) {
    GgufTensorInfo info;
    info.name = c_.read_string(str("name of tensor #", i));
    EFIM_CHECK(!info.name.empty(), pre(), ": tensor #", i, " has an empty name");
    EFIM_CHECK(names.insert(info.name).second, pre(), ": duplicate tensor name '", info.name, "'");
    const std::string t = str("tensor '", info.name, "'");
    auto n_dims = c_.read<uint32_t>(t + " n_dims");
    EFIM_CHECK(n_dims <= kMaxDims, pre(), ": ", t, " has ", n_dims, " dims (at most ", kMaxDims,
               ")");
    for (uint32_t d = 0; d < n_dims; ++d) {
      auto ne = c_.read<uint64_t>(str(t, " dim ", d));
      EFIM_CHECK(ne <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), pre(), ": ",
                 t, " dim ", d, " = ", ne, " is out of range");
      info.dims.push_back(static_cast<int64_t>(ne));
    }
    auto type_id = c_.read<uint32_t>(t + " type");
    auto dtype = dtype_from_ggml_type(type_id);
    EFIM_CHECK(dtype.has_value(), pre(), ": ", t, " has unsupported ggml type ", type_id, " (",
               ggml_type_name(type_id), "); efim loads ", loadable_ggml_types());
    info.dtype = *dtype;
    info.offset = c_.read<uint64_t>(t + " data offset");
    info.nbytes = tensor_nbytes(info, t);
    p_.infos.push_back(std::move(info));
  }

  // dtype_row_bytes(dtype, ne0) * ne1 * ne2 * ne3, with every step checked for overflow.
  uint64_t tensor_nbytes(const GgufTensorInfo& info, const std::string& t) const {
    const auto& di = dtype_info(info.dtype);
    uint64_t ne0 = info.dims.empty() ? 1 : static_cast<uint64_t>(info.dims[0]);
    EFIM_CHECK(ne0 % static_cast<uint64_t>(di.block_elems) == 0, pre(), ": ", t, " of type ",
               di.name, " has rows of ", ne0, " elements, not a multiple of the block size ",
               di.block_elems);
    EFIM_CHECK(ne0 / static_cast<uint64_t>(di.block_elems) <=
                   std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(di.block_bytes),
               pre(), ": ", t, " byte size overflows (dims ", dims_str(info.dims), ")");
    uint64_t bytes = dtype_row_bytes(info.dtype, ne0);
    for (size_t d = 1; d < info.dims.size(); ++d) {
      auto ne = static_cast<uint64_t>(info.dims[d]);
      EFIM_CHECK(ne == 0 || bytes <= std::numeric_limits<uint64_t>::max() / ne, pre(), ": ", t,
                 " byte size overflows (dims ", dims_str(info.dims), ")");
      bytes *= ne;
    }
    return bytes;
  }

  static std::string dims_str(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  }

  // Data section start, and every tensor aligned, inside the file and not overlapping another.
  void check_layout() {
    const uint64_t size = c_.size();
    p_.data_offset = c_.pos();
    if (p_.infos.empty()) return;  // llama.cpp does not pad a file without tensors
    p_.data_offset = align_up(c_.pos(), p_.alignment);
    EFIM_CHECK(p_.data_offset <= size, pre(), ": data section starts at ", p_.data_offset,
               " (aligned to ", p_.alignment, ") past the end of the file (size ", size, ")");
    const uint64_t data_size = size - p_.data_offset;
    for (const auto& ti : p_.infos) {
      EFIM_CHECK(ti.offset % p_.alignment == 0, pre(), ": tensor '", ti.name, "' data offset ",
                 ti.offset, " is not a multiple of the alignment ", p_.alignment);
      if (ti.offset > data_size || ti.nbytes > data_size - ti.offset)
        fail(pre(), ": tensor '", ti.name, "' data [offset ", p_.data_offset + ti.offset, ", +",
             ti.nbytes, " bytes] ends past the file (size ", size, ")");
    }
    std::vector<const GgufTensorInfo*> by_offset;
    for (const auto& ti : p_.infos)
      if (ti.nbytes > 0) by_offset.push_back(&ti);
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const auto *prev = by_offset[i - 1], *cur = by_offset[i];
      EFIM_CHECK(prev->offset + prev->nbytes <= cur->offset, pre(), ": tensors '", prev->name,
                 "' [", prev->offset, ", ", prev->offset + prev->nbytes, ") and '", cur->name,
                 "' [", cur->offset, ", ", cur->offset + cur->nbytes, ") overlap");
    }
  }

  ByteCursor c_;
  Parsed p_;
  uint64_t n_values_ = 0;
};

}  // namespace

GgufFile GgufFile::parse(const uint8_t* bytes, size_t size, const std::string& label) {
  Parsed p = Parser(bytes, size, label).run();
  GgufFile f;
  f.base_ = bytes;
  f.size_ = size;
  f.label_ = label;
  f.version_ = p.version;
  f.alignment_ = p.alignment;
  f.data_offset_ = p.data_offset;
  f.kv_ = std::move(p.kv);
  f.kv_order_ = std::move(p.kv_order);
  f.infos_ = std::move(p.infos);
  for (size_t i = 0; i < f.infos_.size(); ++i) f.index_.emplace(f.infos_[i].name, i);
  return f;
}

GgufFile GgufFile::open(const std::string& path, MapMode mode) {
  MappedFile mapped(path, mode);
  // The mapping's address survives the move into `f`, so views into it stay valid.
  GgufFile f = parse(mapped.data(), mapped.size(), path);
  f.file_ = std::move(mapped);
  return f;
}

const GgufValue* GgufFile::get(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::vector<std::string> GgufFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(infos_.size());
  for (const auto& ti : infos_) names.push_back(ti.name);
  return names;
}

std::optional<TensorView> GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const GgufTensorInfo& ti = infos_[it->second];
  TensorView v;
  v.name = ti.name;
  v.dtype = ti.dtype;
  v.shape.assign(ti.dims.rbegin(), ti.dims.rend());  // GGUF lists ne[0] (innermost) first
  v.data = base_ + data_offset_ + ti.offset;
  v.nbytes = ti.nbytes;
  return v;
}

uint8_t* GgufFile::writable(const void* p, size_t n) {
  const auto* q = static_cast<const uint8_t*>(p);
  if (file_.data() == nullptr || base_ != file_.data() || q < base_ || n > size_ ||
      static_cast<size_t>(q - base_) > size_ - n)
    return nullptr;
  if (!writable_) writable_ = file_.make_writable();
  return writable_ ? const_cast<uint8_t*>(q) : nullptr;
}

size_t GgufFile::discard(const void* p, size_t n) {
  if (base_ != file_.data()) return 0;
  return file_.discard(static_cast<const uint8_t*>(p), n);
}

void GgufFile::seal() {
  if (writable_) file_.make_read_only();
  writable_ = false;
}

}  // namespace efim
