// Subcommands of the `efim` binary: each registers its options and its callback on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace efim::app {

void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_generate(CLI::App& app);
void register_convert(CLI::App& app);
void register_imatrix(CLI::App& app);
void register_bench_model(CLI::App& app);
void register_logits(CLI::App& app);
void register_serve(CLI::App& app);
void register_data(CLI::App& app);   // efim data ...
void register_train(CLI::App& app);  // efim train ...
// `efim bench <workload>`: registered on the `bench` parent command.
void register_bench_infill(CLI::App& bench);
void register_eval(CLI::App& app);

}  // namespace efim::app
