// `efim inspect MODEL`: architecture, sizes, tensor dtypes, vocabulary and FIM tokens.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "base/progress.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/config.h"

namespace efim::app {
namespace {

struct InspectArgs {
  std::string model;
  bool tensors = false;
};

void print_fim(const Tokenizer& tok) {
  const FimTokens& f = tok.fim();
  auto show = [&](const char* role, int32_t id) {
    if (id < 0) {
      std::printf("  %-10s (none)\n", role);
    } else {
      std::printf("  %-10s %6d %s\n", role, id, std::string(tok.token_text(id)).c_str());
    }
  };
  std::printf("FIM tokens:\n");
  show("prefix", f.prefix);
  show("suffix", f.suffix);
  show("middle", f.middle);
  show("pad", f.pad);
  show("eot", f.eot);
  show("repo_name", f.repo_name);
  show("file_sep", f.file_sep);
}

void run_inspect(const InspectArgs& a) {
  namespace fs = std::filesystem;
  std::unique_ptr<TensorSource> source;
  ModelConfig config;
  uint64_t file_bytes = 0;
  if (is_gguf_path(a.model)) {
    auto gguf = std::make_unique<GgufFile>(GgufFile::open(a.model));
    config = config_from_gguf(*gguf);
    std::printf("format:       GGUF v%u, %zu metadata keys, %zu tensors\n", gguf->version(),
                gguf->metadata().size(), gguf->tensors().size());
    file_bytes = fs::file_size(a.model);
    source = std::move(gguf);
  } else {
    config = config_from_hf_file((fs::path(a.model) / "config.json").string());
    source = SafetensorsFolder::open(a.model);
    for (const auto& e : fs::directory_iterator(a.model))
      if (e.path().extension() == ".safetensors") file_bytes += e.file_size();
    std::printf("format:       Hugging Face folder (safetensors)\n");
  }
  std::printf("architecture: %s\n", config.summary().c_str());

  std::map<std::string, int64_t> params_by_dtype;
  int64_t params = 0;
  for (const auto& name : source->tensor_names()) {
    auto t = source->find(name);
    if (!t) continue;
    params += t->numel();
    params_by_dtype[std::string(dtype_name(t->dtype))] += t->numel();
    if (a.tensors)
      std::printf("  %-48s %-6s %s\n", name.c_str(), std::string(dtype_name(t->dtype)).c_str(),
                  t->shape_str().c_str());
  }
  std::printf("parameters:   %.2fM in %s", params / 1e6, human_bytes(double(file_bytes)).c_str());
  for (const auto& [dtype, n] : params_by_dtype) std::printf(", %s %.2fM", dtype.c_str(), n / 1e6);
  std::printf("\n");

  Tokenizer tok = load_tokenizer(a.model);
  std::printf("vocabulary:   %d tokens, pre-tokenizer '%s'%s, bos %d, eos %d\n", tok.vocab_size(),
              std::string(tok.pre_name()).c_str(), tok.nfc() ? " (NFC)" : "", tok.bos(),
              tok.eos());
  print_fim(tok);
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Describe a model: architecture, sizes, vocabulary");
  cmd->add_option("model", args->model, "HF folder or .gguf file")->required();
  cmd->add_flag("--tensors", args->tensors, "List every tensor with dtype and shape");
  cmd->callback([args] { run_inspect(*args); });
}

}  // namespace efim::app
