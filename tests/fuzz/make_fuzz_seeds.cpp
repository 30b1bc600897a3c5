// Writes small valid GGUF and safetensors files into <dir>/gguf and <dir>/safetensors as seed
// corpora for the fuzzers.
#include <filesystem>
#include <iostream>
#include <string>

#include "format/gguf.h"
#include "format/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_seeds <dir>\n";
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path dir = argv[1];
  fs::create_directories(dir / "gguf");
  fs::create_directories(dir / "safetensors");
  using namespace efim;

  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_strings("tokenizer.ggml.tokens", {"<s>", "a", "bc"});
  w.set_i32s("tokenizer.ggml.token_type", {3, 1, 1});
  w.set("nested", gguf_array(GgufType::ARRAY, {gguf_array(GgufType::U16, {gguf_uint(GgufType::U16, 7)})}));
  w.write((dir / "gguf" / "meta_only.gguf").string());
  std::string f32(4 * 4 * 2, '\1'), q8(34 * 2, '\2'), q4k(144, '\3'), bf16(2 * 3, '\4');
  w.add_tensor("a.f32", DType::F32, {2, 4}, f32.data(), f32.size());
  w.add_tensor("b.q8_0", DType::Q8_0, {2, 32}, q8.data(), q8.size());
  w.add_tensor("c.q4_k", DType::Q4_K, {1, 256}, q4k.data(), q4k.size());
  w.add_tensor("d.bf16", DType::BF16, {3}, bf16.data(), bf16.size());
  w.write((dir / "gguf" / "tensors.gguf").string());

  std::vector<SafetensorsTensor> ts = {{"w", DType::BF16, {2, 3}, std::string(12, '\5')},
                                       {"b", DType::F32, {3}, std::string(12, '\6')},
                                       {"i", DType::I8, {}, "\7"}};
  write_safetensors((dir / "safetensors" / "small.safetensors").string(), ts, {{"format", "pt"}});
  return 0;
}
