// Opening what a user points efim at: a Hugging Face folder or a GGUF file, with its tokenizer.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/convert.h"
#include "model/model.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace efim::app {

bool is_gguf_path(const std::string& path);

// tokenizer.json inside a HF folder, or the GGUF's tokenizer metadata.
Tokenizer load_tokenizer(const std::string& model_path);

struct LoadedModel {
  std::unique_ptr<Model> model;
  Tokenizer tokenizer;
};
LoadedModel load_model(const std::string& path, int n_threads);

// What the server says about the model file (Ollama's /api/tags details): format, parameter
// count, llama.cpp's file type name (general.file_type, else the most common matrix dtype).
ModelCard model_card(const std::string& path, const Model& model);

struct FolderConvertOptions {
  FileType type = FileType::BF16;  // llama.cpp's rules give each matrix its type
  bool progress_bar = false;
  std::function<void(GgufWriter&)> extra;  // more metadata after the model's and tokenizer's
  std::string imatrix_path;  // llama-imatrix's file (GGUF or legacy .dat); empty: none
};

// A HF folder (config.json, safetensors, tokenizer.json) as a GGUF with the tokenizer's
// metadata, matrices as the options say; or a GGUF of float tensors quantized so (its metadata
// kept: quantize_gguf). With an importance matrix, prints how many matrices
// it weighted and names those it had no entry for.
ConvertResult convert_folder_to_gguf(const std::string& hf_dir, const std::string& gguf_path,
                                     const FolderConvertOptions& o);

// --speculative off|ngram|draft|ngram+draft with --draft-min / --draft-max, as the engine's
// options (draft: the draft model drafts; ngram+draft: n-gram drafts first, the draft model
// where none is found; the caller sets draft_model); throws Error naming the option for a bad
// value. An empty mode: draft with a draft model, else off.
SpeculativeOptions speculative_options(const std::string& mode, int draft_min, int draft_max,
                                       bool have_draft_model = false);

// --draft-model: a model that drafts for `target`, run on the target's threads. Throws Error
// unless its tokenizer is the target's (the same tokens, spelled the same).
std::unique_ptr<Model> load_draft_model(const std::string& path, LoadedModel& target);

// Reads --text or --file (exactly one must be given).
std::string text_argument(const std::string& text, const std::string& file, const char* what);

// Parses "1 2 3" or "1,2,3"; every id must be in [0, vocab).
std::vector<int32_t> parse_token_ids(const std::string& text, int32_t vocab);

}  // namespace efim::app
