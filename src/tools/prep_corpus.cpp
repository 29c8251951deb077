// bertcc prep-corpus: text files/folders -> Google's format (one sentence per line, blank line
// between documents), sentence-segmented, in N size-balanced train shards plus held-out test shards
// (the work: prepare_corpus, data/corpus.cpp).
#include <iostream>

#include "bertcc/corpus.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

void add_prep_corpus(CLI::App& app) {
  auto o = std::make_shared<CorpusPrepOptions>();
  auto* sub = app.add_subcommand("prep-corpus",
                                 "Text files or folders (each file one document: books, articles) and Wikipedia "
                                 "XML dumps (.xml, .xml.bz2; each article one document) -> sentence-segmented "
                                 "shards in Google's format (train/ and test/)");
  sub->add_option("--input", o->inputs,
                  "files, folders (.txt, recursive) or Wikipedia dumps (.xml, .xml.bz2); several corpora are mixed")
      ->required()
      ->delimiter(',');
  sub->add_option(flag("--output-dir", {"--output"}), o->output, "output folder")->required();
  sub->add_option(flag("--shards"), o->shards, "train shards (default 4)")
      ->check(in_range(1, 100000, "output files open at once"));
  sub->add_option(flag("--test-fraction"), o->test_fraction, "held-out fraction of documents (default 0)")
      ->check(in_range(0, 0.9, "a fraction of the documents"));
  sub->add_option(flag("--seed"), o->seed, "seed for the held-out choice")->check(in_range(0, kMaxSeed, "a seed"));
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  sub->add_option("--stream-above-mb", o->stream_above_mb,
                  "text files larger than this are read paragraph by paragraph (bounded memory; default 64)")
      ->check(in_range(0, 1048576, "MB read whole into memory per file and thread"));
  sub->callback([o]() {
    const CorpusPrepResult r = prepare_corpus(*o);
    const bool held = r.test_shards > 0;
    std::cout << "prep-corpus: " << r.docs << " documents"
              << (held ? " (" + std::to_string(r.held_out) + " held out)" : "") << ", " << r.sentences
              << " sentences -> " << r.train_shards << " train shard(s)"
              << (held ? " + " + std::to_string(r.test_shards) + " test shard(s)" : "") << " in " << o->output
              << (r.empty_docs ? " (" + std::to_string(r.empty_docs) + " empty documents skipped)" : "")
              << (r.invalid_utf8 ? " (" + std::to_string(r.invalid_utf8) + " invalid UTF-8 sequences replaced)" : "")
              << "\n";
  });
}

}  // namespace bertcc::tools
