// `efim tokenize MODEL (TEXT | --text-file F)`: token ids of a text, optionally with pieces.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"

namespace efim::app {
namespace {

struct TokenizeArgs {
  std::string model, text, text_file;
  bool special = false, pieces = false, add_bos = false;
};

void run_tokenize(const TokenizeArgs& a) {
  Tokenizer tok = load_tokenizer(a.model);
  std::string text = text_argument(a.text, a.text_file, "text");
  EncodeOptions opts;
  opts.parse_special = a.special;
  opts.add_bos = a.add_bos;
  std::vector<int32_t> ids = tok.encode(text, opts);
  if (a.pieces) {
    for (int32_t id : ids)
      std::printf("%6d  %s\n", id, std::string(tok.token_text(id)).c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
  std::fprintf(stderr, "%zu tokens, %zu bytes\n", ids.size(), text.size());
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("model", args->model, "HF folder, tokenizer.json or .gguf file")->required();
  cmd->add_option("text", args->text, "Text to tokenize");
  cmd->add_option("--text-file", args->text_file, "Read the text from a file");
  cmd->add_flag("--special", args->special, "Parse special tokens written in the text");
  cmd->add_flag("--add-bos", args->add_bos, "Prepend the BOS token when the model has one");
  cmd->add_flag("--pieces", args->pieces, "Print one id per line with its vocabulary piece");
  cmd->callback([args] { run_tokenize(*args); });
}

}  // namespace efim::app
