#include "train/nn/checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"

namespace efim::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "efim-train-checkpoint";
constexpr int kVersion = 1;

void write_floats(const fs::path& path, const std::vector<float>& v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  write_file(path.string(), bytes);
}

std::vector<float> read_floats(const fs::path& path, int64_t n) {
  MappedFile f(path.string());
  EFIM_CHECK(f.size() == static_cast<size_t>(n) * sizeof(float), path.string(), ": ", f.size(),
             " bytes, expected ", n, " floats = ", n * int64_t(sizeof(float)), " bytes");
  std::vector<float> v(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), f.data(), f.size());
  return v;
}

nlohmann::json tensor_list(const ParamLayout& L) {
  nlohmann::json t = nlohmann::json::array();
  for (const ParamTensor& x : L.tensors) t.push_back({x.name, x.numel});
  return t;
}

// Replaces `dir` by `tmp` (a complete checkpoint): rename the old one aside, move the new one
// in, then delete the old one.
void replace_dir(const fs::path& tmp, const fs::path& dir) {
  const fs::path old = dir.string() + ".old";
  fs::remove_all(old);
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  fs::remove_all(old);
}

}  // namespace

void save_checkpoint(const CheckpointSave& o, const Params& p, const Trainer& tr,
                     const CheckpointState& s) {
  const fs::path dir = fs::path(o.dir).lexically_normal();
  EFIM_CHECK(!dir.empty() && dir.has_filename(), "train: bad checkpoint folder '", o.dir, "'");
  const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_floats(tmp / "params.f32", p.w);
  write_floats(tmp / "adam_m.f32", tr.optimizer().m());
  write_floats(tmp / "adam_v.f32", tr.optimizer().v());
  save_hf_params(p, SaveOptions{(tmp / "model").string(), o.model_dtype, o.source_dir, 0});
  const nlohmann::json state = {{"format", kFormat},
                                {"version", kVersion},
                                {"step", s.step},
                                {"adam_steps", tr.optimizer().steps_taken()},
                                {"batches", s.batches},
                                {"total_params", p.layout.total},
                                {"tensors", tensor_list(p.layout)},
                                {"run", s.run}};
  write_file((tmp / "state.json").string(), state.dump(1) + "\n");
  replace_dir(tmp, dir);
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  EFIM_CHECK(j.is_object() && j.value("format", "") == kFormat, path, ": format is not '", kFormat,
             "'");
  EFIM_CHECK(j.value("version", -1) == kVersion, path, ": version ", j.value("version", -1),
             ", this build reads ", kVersion);
  for (const char* key : {"step", "adam_steps", "batches", "total_params"})
    EFIM_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= 0, path,
               ": field '", key, "' must be a non-negative integer");
  CheckpointState s;
  s.step = j["step"].get<int64_t>();
  s.batches = j["batches"].get<int64_t>();
  if (j.contains("run")) s.run = j["run"];
  return s;
}

Params load_checkpoint_params(const std::string& dir) {
  const nlohmann::json j =
      nlohmann::json::parse(read_file((fs::path(dir) / "state.json").string()));
  Params p = load_hf_params((fs::path(dir) / "model").string());
  EFIM_CHECK(
      j["total_params"].get<int64_t>() == p.layout.total && j["tensors"] == tensor_list(p.layout),
      dir, ": state.json lists ", j["total_params"].get<int64_t>(),
      " parameters / tensors that differ from model/ (", p.layout.total, ")");
  p.w = read_floats(fs::path(dir) / "params.f32", p.layout.total);
  return p;
}

CheckpointState load_checkpoint_optimizer(const std::string& dir, Trainer& tr) {
  const CheckpointState s = read_checkpoint_state(dir);
  const nlohmann::json j =
      nlohmann::json::parse(read_file((fs::path(dir) / "state.json").string()));
  const int64_t n = static_cast<int64_t>(tr.optimizer().m().size());
  EFIM_CHECK(j["total_params"].get<int64_t>() == n, dir, ": checkpoint has ",
             j["total_params"].get<int64_t>(), " parameters, the trainer ", n);
  tr.restore(s.step, j["adam_steps"].get<int64_t>(), read_floats(fs::path(dir) / "adam_m.f32", n),
             read_floats(fs::path(dir) / "adam_v.f32", n));
  return s;
}

}  // namespace efim::train
