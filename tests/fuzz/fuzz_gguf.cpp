// libFuzzer target for the GGUF reader: any input must parse or throw efim::Error; a parsed
// file's tensor views must lie inside the input, and its metadata must survive a rewrite.
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "format/gguf.h"

namespace {

// Reads every byte a view claims (ASan reports any byte outside the input).
uint64_t touch(const efim::TensorView& v) {
  uint64_t sum = 0;
  const auto* p = static_cast<const uint8_t*>(v.data);
  for (uint64_t i = 0; i < v.nbytes; ++i) sum += p[i];
  return sum;
}

// Writing the parsed metadata and parsing it again must give the same keys in the same order.
void check_metadata_round_trip(const efim::GgufFile& f) {
  efim::GgufWriter w;
  for (const auto& key : f.metadata_order()) {
    if (key == "general.alignment") continue;  // the writer fixes it at 32
    w.set(key, *f.get(key));
  }
  std::string bytes;
  try {
    bytes = w.serialize();
  } catch (const efim::Error&) {
    return;
  }
  try {  // what the writer accepts, the reader must read back
    auto g = efim::GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                   "rt");
    size_t skipped = f.get("general.alignment") ? 1 : 0;
    if (g.metadata_order().size() + skipped != f.metadata_order().size()) __builtin_trap();
  } catch (const efim::Error&) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = efim::GgufFile::parse(data, size, "fuzz");
    volatile uint64_t sink = 0;
    for (const auto& name : f.tensor_names()) {
      auto v = f.find(name);
      if (!v) __builtin_trap();
      sink = sink + touch(*v);
    }
    for (const auto& [key, value] : f.metadata()) {
      try {  // accessors may refuse a type, but only with efim::Error
        if (value.type == efim::GgufType::ARRAY) (void)value.as_ints();
        else (void)value.as_f64();
      } catch (const efim::Error&) {
      }
    }
    check_metadata_round_trip(f);
  } catch (const efim::Error&) {
  }
  return 0;
}
