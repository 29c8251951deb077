// bertcc: BERT/ELECTRA pre-training and fine-tuning, natively.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>

#include "bertcc/dist.h"
#include "bertcc/error.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/signals.h"
#include "core/settings.h"
#include "tools/cli_common.h"

// Process-wide set-up, before any thread exists.
static void start_process() {
  // SIGINT/SIGTERM go to one signal thread only (bertcc/signals.h).
  bertcc::signals::start();
  // Shards are read by a child process, so that libhdf5 crashing on a malformed file is an error.
  bertcc::isolate_hdf5_reads();
  // A file-size limit (ulimit -f) must end in a write error that names the file, not in SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
}

int main(int argc, char** argv) {
  // bertcc's own HDF5 reader process (bertcc/pretrain_data.h), not a user command.
  if (argc == 2 && std::strcmp(argv[1], "__hdf5-reader") == 0) return bertcc::hdf5_reader_main();
  start_process();
  CLI::App app{
      "bertcc: BERT and ELECTRA natively: data preparation, pre-training, fine-tuning, evaluation, inference, "
      "serving and export, on CPUs (oneDNN) and NVIDIA GPUs (--device cuda)"};
  app.formatter(bertcc::tools::help_formatter());  // before the commands: each copies it
  app.require_subcommand(1);
  app.set_version_flag("--version", "bertcc 0.1.0");
  // In the order people work; the developer tools last (each command's group is set below).
  bertcc::tools::add_prep_corpus(app);
  bertcc::tools::add_train_vocab(app);
  bertcc::tools::add_tokenize(app);
  bertcc::tools::add_create_data(app);
  bertcc::tools::add_pretrain(app);
  bertcc::tools::add_finetune(app);
  bertcc::tools::add_lr_find(app);
  bertcc::tools::add_eval(app);
  bertcc::tools::add_infer(app);
  bertcc::tools::add_serve(app);
  bertcc::tools::add_model_tools(app);
  bertcc::tools::add_plot(app);
  bertcc::tools::add_dump_step(app);
  bertcc::tools::add_bench(app);
  const std::pair<const char*, const char*> groups[] = {{"prep-corpus", "Prepare data"},
                                                        {"train-vocab", "Prepare data"},
                                                        {"tokenize", "Prepare data"},
                                                        {"create-pretraining-data", "Prepare data"},
                                                        {"pretrain", "Train"},
                                                        {"finetune", "Train"},
                                                        {"lr-find", "Train"},
                                                        {"eval", "Evaluate, infer and serve"},
                                                        {"qa", "Evaluate, infer and serve"},
                                                        {"classify", "Evaluate, infer and serve"},
                                                        {"tag", "Evaluate, infer and serve"},
                                                        {"embed", "Evaluate, infer and serve"},
                                                        {"fill-mask", "Evaluate, infer and serve"},
                                                        {"serve", "Evaluate, infer and serve"},
                                                        {"init-model", "Models: create, convert, export, plot"},
                                                        {"convert", "Models: create, convert, export, plot"},
                                                        {"export-onnx", "Models: create, convert, export, plot"},
                                                        {"plot", "Models: create, convert, export, plot"},
                                                        {"random-batch", "Developer tools"},
                                                        {"dump-step", "Developer tools"},
                                                        {"bench", "Developer tools"}};
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    const char* group = "Developer tools";
    for (const auto& [name, g] : groups)
      if (sub->get_name() == name) group = g;
    sub->group(group);
  }
  // Every command's help ends with the same note (subcommands copied the footer when made).
  std::function<void(CLI::App*)> note = [&note](CLI::App* a) {
    a->footer(
        "Every flag also takes its underscore spelling (--max-seq-length = --max_seq_length); old "
        "spellings shown after a comma keep working. All commands' flags: docs/flags.md");
    for (CLI::App* s : a->get_subcommands([](CLI::App*) { return true; })) note(s);
  };
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) note(sub);
  app.footer(
      "Run `bertcc COMMAND --help` for a command's flags and their defaults. Flags use NVIDIA's names in dash "
      "form; the underscore spelling works too (--max-seq-length = --max_seq_length). All commands' flags: "
      "docs/flags.md");
  bertcc::tools::show_defaults(app);
  bertcc::tools::check_numeric_flags(app);  // NaN/inf and non-integers, for every command's flags
  // A fatal error on any rank of a multi-process job ends the whole job with that rank's message.
  // The message goes out in one write: std::cerr is unbuffered, so each << was a write of its own,
  // and the launcher's abort banner (Open MPI prints one when a rank aborts) could land between
  // them, splitting the rank's message in two.
  auto say = [](const std::string& line) {
    const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    (void)n;  // nothing more to do if stderr is gone
  };
  auto fatal = [&say](const char* what) {
    if (bertcc::dist::is_distributed()) {
      auto& c = bertcc::dist::world();
      say("bertcc: error (rank " + std::to_string(c.rank()) + " of " + std::to_string(c.world()) + "): " + what + "\n");
      c.abort(1);
    }
    say(std::string("bertcc: error: ") + what + "\n");
    return 1;
  };
  try {
    bertcc::settings();  // the BERTCC_* environment, read once here: a bad value ends the run before any work
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    bertcc::dist::finalize();
    // A misspelt flag or command: name the nearest ones instead of CLI11's "not expected".
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ExtrasError) ||
        e.get_exit_code() == static_cast<int>(CLI::ExitCodes::RequiredError)) {
      const std::string msg = bertcc::tools::unknown_argument_message(app);
      if (!msg.empty()) {
        // A missing required flag as well (bertcc pretrain --outptu-dir X): say both.
        const bool in_command = !app.get_subcommands().empty();
        say(msg + (in_command && e.get_exit_code() == static_cast<int>(CLI::ExitCodes::RequiredError)
                       ? std::string("bertcc: error: ") + e.what() + "\n"
                       : std::string()));
        return e.get_exit_code();
      }
    }
    return app.exit(e);
  } catch (const bertcc::Error& e) {
    return fatal(e.what());
  } catch (const std::exception& e) {
    return fatal(e.what());
  }
  bertcc::dist::finalize();
  // Results go to stdout: a failed write (a full disk, a closed pipe) must not end with exit 0.
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::cerr << "bertcc: error: writing to standard output failed: " << std::strerror(errno) << "\n";
    return 1;
  }
  return 0;
}
