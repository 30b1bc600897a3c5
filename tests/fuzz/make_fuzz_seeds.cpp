// Writes seed corpora for the fuzzers: small valid GGUF and safetensors files into <dir>/gguf and
// <dir>/safetensors, and tokenizer inputs into <dir>/tok (fuzz_tokenizer's first byte picks the
// mode: even = a tokenizer.json, 1 mod 4 = text for the byte-level vocabulary, 3 mod 4 = text for
// the SentencePiece one).
#include <filesystem>
#include <fstream>
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
  fs::create_directories(dir / "tok");
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

  auto seed = [&](const std::string& name, char mode, const std::string& body) {
    std::ofstream(dir / "tok" / name, std::ios::binary) << mode << body;
  };
  seed("bpe.json", '\0',
       R"({"version":"1.0","added_tokens":[{"id":3,"content":"<fim_prefix>","special":true}],)"
       R"("normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,)"
       R"("trim_offsets":true,"use_regex":true},"decoder":{"type":"ByteLevel"},)"
       R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})");
  seed("spm.json", '\2',
       R"({"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"\u2581"},)"
       R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"}]},)"
       R"("model":{"type":"BPE","byte_fallback":true,"vocab":{"<unk>":0,"<0x41>":1,"\u2581":2},)"
       R"("merges":[]}})");
  seed("code.txt", '\1', "def f(x):\n    return x * 2  # \xc3\xa9 \xe2\x82\xac\n\t<fim_prefix>\r\n");
  seed("unicode.txt", '\1', "\xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87  \xff\xfe bad bytes");
  seed("spm_code.txt", '\3', "  int main() { return 0; }\n\xe2\x96\x81 <PRE> \xc3\xa9");
  return 0;
}
