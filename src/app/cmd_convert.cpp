// `efim convert HF_DIR -o OUT.gguf [--dtype bf16|f16|f32|q8_0|q4_0]`.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/progress.h"

namespace efim::app {
namespace {

struct ConvertArgs {
  std::string input, output, dtype = "bf16";
};

void run_convert(const ConvertArgs& a) {
  const ConvertResult r = convert_folder_to_gguf(a.input, a.output, dtype_from_name(a.dtype), true);
  std::printf("wrote %s: %lld tensors, %s of tensor data (%s)\n", a.output.c_str(),
              static_cast<long long>(r.n_tensors), human_bytes(double(r.tensor_bytes)).c_str(),
              r.config.summary().c_str());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand("convert", "Convert a Hugging Face folder to GGUF");
  cmd->add_option("input", a->input, "HF folder: config.json, safetensors, tokenizer.json")
      ->required();
  cmd->add_option("-o,--output", a->output, "GGUF file to write")->required();
  cmd->add_option("--dtype", a->dtype, "Matrix dtype: f32, f16, bf16, q8_0 or q4_0")
      ->capture_default_str();
  cmd->callback([a] { run_convert(*a); });
}

}  // namespace efim::app
