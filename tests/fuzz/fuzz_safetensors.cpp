// libFuzzer target for the safetensors reader: any input must parse or throw efim::Error, and a
// parsed file's views must lie inside the input with sizes matching their shapes.
#include <cstdint>

#include "base/error.h"
#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = efim::SafetensorsFile::parse(data, size, "fuzz");
    volatile uint64_t sink = 0;
    for (const auto& name : f->tensor_names()) {
      auto v = f->find(name);
      if (!v) __builtin_trap();
      if (v->nbytes != static_cast<uint64_t>(v->numel()) * efim::dtype_info(v->dtype).block_bytes)
        __builtin_trap();
      const auto* p = static_cast<const uint8_t*>(v->data);
      for (uint64_t i = 0; i < v->nbytes; ++i) sink = sink + p[i];
    }
  } catch (const efim::Error&) {
  }
  return 0;
}
