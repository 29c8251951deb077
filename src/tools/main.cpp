// bertcc: BERT/ELECTRA pre-training and fine-tuning, natively.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <unistd.h>

#include "bertcc/dist.h"
#include "bertcc/error.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/signals.h"
#include "tools/cli_common.h"

int main(int argc, char** argv) {
  // bertcc's own HDF5 reader process (bertcc/pretrain_data.h), not a user command.
  if (argc == 2 && std::strcmp(argv[1], "__hdf5-reader") == 0) return bertcc::hdf5_reader_main();
  // Before any thread exists: SIGINT/SIGTERM go to one signal thread only (bertcc/signals.h).
  bertcc::signals::start();
  // Shards are read by a child process, so that libhdf5 crashing on a malformed file is an error.
  bertcc::isolate_hdf5_reads();
  // A file-size limit (ulimit -f) must end in a write error that names the file, not in SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"bertcc: BERT pre-training, fine-tuning and inference on CPU (oneDNN)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bertcc 0.1.0");
  bertcc::tools::add_dump_step(app);
  bertcc::tools::add_bench(app);
  bertcc::tools::add_model_tools(app);
  bertcc::tools::add_tokenize(app);
  bertcc::tools::add_create_data(app);
  bertcc::tools::add_prep_corpus(app);
  bertcc::tools::add_train_vocab(app);
  bertcc::tools::add_pretrain(app);
  bertcc::tools::add_plot(app);
  bertcc::tools::add_eval(app);
  bertcc::tools::add_finetune(app);
  bertcc::tools::add_infer(app);
  bertcc::tools::add_serve(app);
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
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    bertcc::dist::finalize();
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
