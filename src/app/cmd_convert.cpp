// `efim convert HF_DIR|F16.gguf -o OUT.gguf [--dtype bf16|...|q4_k_m|q3_k_m|q2_k|iq4_xs]
// [--imatrix FILE] [--set KEY=VALUE ...]` (a GGUF of float tensors is quantized as
// llama-quantize does, its metadata kept), and
// `efim convert IN.gguf -o OUT.gguf --set KEY=VALUE ...`: a GGUF copied with its tensors byte
// for byte and its metadata edited (e.g. --set efim.fragment_tokenization=true declares a
// fragment-trained model, see infill/healing.h).
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "base/progress.h"
#include "format/gguf.h"

namespace efim::app {
namespace {

struct ConvertArgs {
  std::string input, output, dtype = "bf16", imatrix;
  bool dtype_given = false;  // a GGUF input is then quantized, else copied with --set edits
  std::vector<std::string> set;  // KEY=VALUE
};

// VALUE: true/false -> bool, an integer -> i32 (i64 when it does not fit), a number -> f32,
// anything else -> string.
GgufValue parse_value(const std::string& v) {
  if (v == "true" || v == "false") return gguf_bool(v == "true");
  size_t used = 0;
  try {
    const long long i = std::stoll(v, &used);
    if (used == v.size()) {
      if (i >= INT32_MIN && i <= INT32_MAX) return gguf_int(GgufType::I32, i);
      return gguf_int(GgufType::I64, i);
    }
    const double d = std::stod(v, &used);
    if (used == v.size()) return gguf_float(GgufType::F32, d);
  } catch (const std::exception&) {
  }
  return gguf_string(v);
}

void apply_sets(const std::vector<std::string>& sets, GgufWriter& w) {
  for (const std::string& s : sets) {
    const size_t eq = s.find('=');
    EFIM_CHECK(eq != std::string::npos && eq > 0, "--set takes KEY=VALUE, got '", s, "'");
    w.set(s.substr(0, eq), parse_value(s.substr(eq + 1)));
  }
}

void rewrite_gguf(const ConvertArgs& a) {
  const GgufFile in = GgufFile::open(a.input);
  GgufWriter w;
  for (const std::string& key : in.metadata_order()) {
    if (key == "general.alignment") continue;  // the writer's own
    w.set(key, *in.get(key));
  }
  apply_sets(a.set, w);
  uint64_t bytes = 0;
  for (const std::string& name : in.tensor_names()) {
    const TensorView t = *in.find(name);
    w.add_tensor(name, t.dtype, t.shape, t.data, t.nbytes);
    bytes += t.nbytes;
  }
  w.write(a.output);
  std::printf("wrote %s: %zu tensors copied (%s), %zu metadata keys set\n", a.output.c_str(),
              in.tensor_names().size(), human_bytes(double(bytes)).c_str(), a.set.size());
}

void run_convert(const ConvertArgs& a) {
  if (is_gguf_path(a.input) && !a.dtype_given) {
    EFIM_CHECK(a.imatrix.empty(), "convert: --imatrix needs --dtype (", a.input,
               " is a GGUF: without --dtype its tensors are copied as they are)");
    return rewrite_gguf(a);
  }
  FolderConvertOptions o;
  o.type = file_type_from_name(a.dtype);
  o.progress_bar = true;
  if (!a.set.empty()) o.extra = [&](GgufWriter& w) { apply_sets(a.set, w); };
  o.imatrix_path = a.imatrix;
  const ConvertResult r = convert_folder_to_gguf(a.input, a.output, o);
  std::printf("wrote %s: %lld tensors, %s of tensor data (%s)\n", a.output.c_str(),
              static_cast<long long>(r.n_tensors), human_bytes(double(r.tensor_bytes)).c_str(),
              r.config.summary().c_str());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand(
      "convert", "Convert a Hugging Face folder to GGUF, or copy a GGUF with edited metadata");
  cmd->add_option("input", a->input,
                  "HF folder (config.json, safetensors, tokenizer.json) or a .gguf file")
      ->required();
  cmd->add_option("-o,--output", a->output, "GGUF file to write")->required();
  cmd->add_option("--dtype", a->dtype,
                  "File type (of a HF folder, or a GGUF of f32/f16/bf16 tensors quantized), "
                  "llama-quantize's names: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, "
                  "q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs "
                  "(q3_k, q4_k, q5_k: the _m mixes); llama.cpp's rules give each tensor its type")
      ->capture_default_str();
  cmd->add_option("--imatrix", a->imatrix,
                  "Importance matrix (llama-imatrix's GGUF or legacy .dat file): the quantized "
                  "matrices fit their scales to the importance-weighted error");
  cmd->add_option("--set", a->set,
                  "KEY=VALUE metadata to set (true/false, integers, numbers, else a string), "
                  "e.g. efim.fragment_tokenization=true");
  cmd->callback([a, cmd] {
    a->dtype_given = cmd->count("--dtype") > 0;
    run_convert(*a);
  });
}

}  // namespace efim::app
