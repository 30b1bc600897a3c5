#include "base/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace efim {

std::string human_bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

ProgressBar::ProgressBar(uint64_t total, ProgressOptions options)
    : total_(total), opt_(std::move(options)) {
  enabled_ = opt_.force || ::isatty(STDERR_FILENO);
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done) {
  done_ = done;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100) || done_ >= total_) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) draw(true);
}

void ProgressBar::draw(bool final_draw) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  if (frac > 1) frac = 1;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  double rate = secs > 0 ? static_cast<double>(done_) / secs : 0;
  double eta = rate > 0 ? static_cast<double>(total_ - std::min(done_, total_)) / rate : 0;
  std::string rate_str =
      opt_.unit == "B" ? human_bytes(rate) + "/s" : std::to_string(static_cast<long>(rate)) +
                                                        " " + opt_.unit + "/s";
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %s ETA %4.0fs %s\x1b[K", opt_.label.c_str(),
               bar.c_str(), 100 * frac, rate_str.c_str(), final_draw ? 0.0 : eta, note_.c_str());
  if (final_draw) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace efim
