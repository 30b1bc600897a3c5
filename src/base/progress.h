// A terminal progress bar on stderr: label, percentage, rate and ETA. Prints nothing when
// stderr is not a terminal unless forced, so logs and tests stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace efim {

struct ProgressOptions {
  std::string label;
  std::string unit = "B";  // shown after the rate, e.g. "B" -> "12.3 MB/s", "tok" -> "tok/s"
  bool force = false;      // draw even when stderr is not a terminal
};

class ProgressBar {
 public:
  ProgressBar(uint64_t total, ProgressOptions options);
  ~ProgressBar();  // finishes the line
  void add(uint64_t n) { update(done_ + n); }
  void update(uint64_t done);
  // Extra text after the bar (e.g. "loss 1.234").
  void set_note(std::string note) { note_ = std::move(note); }
  void finish();

 private:
  void draw(bool final_draw);
  uint64_t total_, done_ = 0;
  ProgressOptions opt_;
  std::string note_;
  bool enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "12.3 MB", "1.5 GB" etc. (decimal units).
std::string human_bytes(double bytes);

}  // namespace efim
