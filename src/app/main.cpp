// efim: an LLM serving engine for code infilling. This file only dispatches subcommands.
#include <cstdio>
#include <exception>

#include "app/commands.h"
#include "base/error.h"

int main(int argc, char** argv) {
  CLI::App app{"efim: fast fill-in-the-middle inference (EFIM prompts, fragment-tuned models)"};
  app.require_subcommand(1);
  efim::app::register_inspect(app);
  efim::app::register_tokenize(app);
  efim::app::register_generate(app);
  efim::app::register_convert(app);
  efim::app::register_imatrix(app);
  efim::app::register_bench_model(app);
  efim::app::register_logits(app);
  efim::app::register_serve(app);
  efim::app::register_data(app);
  efim::app::register_train(app);
  efim::app::register_eval(app);
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of whole workloads");
  bench->require_subcommand(1);
  efim::app::register_bench_infill(*bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const efim::Error& e) {
    std::fprintf(stderr, "efim: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "efim: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
