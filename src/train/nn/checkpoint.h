// Training checkpoints: everything a run needs to continue bit for bit.
//
// A checkpoint folder holds
//   params.f32, adam_m.f32, adam_v.f32   [layout.total] little-endian f32 each: the weights
//                                        and AdamW's first and second moments
//   state.json                           format/version, optimizer steps, AdamW's step count,
//                                        batches drawn from the training source, the tensor
//                                        list (name, numel) and the run's options ("run")
//   model/                               the weights as an HF folder (config, safetensors,
//                                        tokenizer): loadable on its own, and the layout source
//                                        on resume
// It is written to a sibling temporary folder first and renamed into place, so a crash leaves
// either the old checkpoint or the new one, never a mix.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "train/nn/params.h"
#include "train/nn/trainer.h"

namespace efim::train {

struct CheckpointState {
  int64_t step = 0;                               // optimizer steps taken (the next step's index)
  int64_t batches = 0;                            // micro-batches drawn from the training source
  nlohmann::json run = nlohmann::json::object();  // the run's options, restored on resume
};

struct CheckpointSave {
  std::string dir;
  std::string source_dir;           // tokenizer/config files for model/ (see SaveOptions)
  DType model_dtype = DType::BF16;  // of model/ (params.f32 always keeps full precision)
};

void save_checkpoint(const CheckpointSave& opts, const Params& p, const Trainer& tr,
                     const CheckpointState& state);

// state.json alone (to learn the run's options before building the Trainer).
CheckpointState read_checkpoint_state(const std::string& dir);

// Params (layout from <dir>/model, values from params.f32) of a checkpoint.
Params load_checkpoint_params(const std::string& dir);

// Restores AdamW's moments and step count and the trainer's step; the layout must match.
CheckpointState load_checkpoint_optimizer(const std::string& dir, Trainer& tr);

}  // namespace efim::train
