// Importance matrices as llama.cpp's llama-imatrix writes them: per weight matrix (GGUF tensor
// name), the mean square of each input column's activations over a calibration text, which
// quantizers use to weight their error (llama-quantize --imatrix; efim convert --imatrix).
//
// Two file formats, both read bounds-checked:
//  * GGUF (llama.cpp's default since mid 2025): general.type "imatrix", and per matrix NAME the
//    f32 tensors NAME.in_sum2 [n_mat, cols] (sums of squares; n_mat = experts of a stacked
//    expert tensor, else 1) and NAME.counts [n_mat] (tokens seen per matrix). The importance is
//    in_sum2 / count, and 1 where a count is 0 (an expert no token reached), as llama-quantize
//    does.
//  * legacy .dat: i32 n_entries, then per entry i32 name length, the name, i32 ncall, i32 nval,
//    f32 values[nval] (already means, times ncall); optionally i32 last call and a dataset name.
//    The importance is values / ncall (values as stored when ncall is 0).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace efim {

struct ImportanceMatrix {
  struct Entry {
    int64_t n_mat = 1;          // matrices (experts) the values cover
    std::vector<float> values;  // [n_mat, cols] importance per input column
    int64_t cols() const { return n_mat ? static_cast<int64_t>(values.size()) / n_mat : 0; }
    // Matrix (expert) e's importance per column.
    std::span<const float> of(int64_t e) const {
      return std::span<const float>(values).subspan(static_cast<size_t>(e * cols()),
                                                    static_cast<size_t>(cols()));
    }
  };
  std::map<std::string, Entry> entries;  // by GGUF tensor name, e.g. "blk.0.attn_q.weight"
  std::vector<std::string> datasets;     // calibration files named by the writer
  int64_t chunk_count = 0, chunk_size = 0;  // imatrix.chunk_count / chunk_size; 0: not given
  bool legacy = false;                   // read from a .dat file

  const Entry* find(const std::string& tensor) const {
    auto it = entries.find(tensor);
    return it == entries.end() ? nullptr : &it->second;
  }
};

// Reads either format (GGUF when the file starts with "GGUF"); throws Error naming the file,
// the entry and the values on any defect.
ImportanceMatrix read_imatrix(const std::string& path);
// The same from bytes in memory (tests, fuzzing); label names the source in errors.
ImportanceMatrix parse_imatrix(const uint8_t* bytes, size_t size, const std::string& label);

// Writes the GGUF format with every count 1 (in_sum2 = the values): llama-quantize reads it.
void write_imatrix_gguf(const ImportanceMatrix& m, const std::string& path);

}  // namespace efim
