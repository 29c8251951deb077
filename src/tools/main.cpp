// bertcc: BERT/ELECTRA pre-training and fine-tuning, natively.
#include <iostream>

#include "bertcc/error.h"
#include "tools/cli_common.h"

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const bertcc::Error& e) {
    std::cerr << "bertcc: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "bertcc: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
