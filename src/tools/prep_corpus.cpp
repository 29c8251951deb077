// bertcc prep-corpus: text files/folders -> Google's format (one sentence per line, blank line
// between documents), sentence-segmented, in N size-balanced train shards plus held-out test shards.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>

#include "bertcc/corpus.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/rng.h"
#include "bertcc/wikipedia.h"
#include "tools/cli_common.h"

namespace bertcc::tools {
namespace fs = std::filesystem;

namespace {

void collect(const std::string& path, std::vector<std::string>& files) {
  BERTCC_CHECK(fs::exists(path), path, ": no such file or folder");
  if (fs::is_directory(path)) {
    std::vector<std::string> found;
    for (const auto& e : fs::recursive_directory_iterator(path))
      if (e.is_regular_file()) found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    for (auto& f : found) {
      const std::string ext = fs::path(f).extension().string();
      if (ext == ".txt" || ext == ".text" || ext.empty()) files.push_back(f);
    }
  } else {
    files.push_back(path);
  }
}

struct Shard {
  std::string tmp, final_path;
  FILE* f = nullptr;
  uint64_t bytes = 0;
  int64_t docs = 0;
};

}  // namespace

void add_prep_corpus(CLI::App& app) {
  struct Opts {
    std::vector<std::string> inputs;
    std::string output;
    int shards = 4;
    double test_fraction = 0.0;
    uint64_t seed = 12345;
    int threads = 0;
    double stream_above_mb = 64;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("prep-corpus",
                                 "Text files or folders (each file one document: books, articles) and Wikipedia "
                                 "XML dumps (.xml, .xml.bz2; each article one document) -> sentence-segmented "
                                 "shards in Google's format (train/ and test/)");
  sub->add_option("--input", o->inputs,
                  "files, folders (.txt, recursive) or Wikipedia dumps (.xml, .xml.bz2); several corpora are mixed")
      ->required()
      ->delimiter(',');
  sub->add_option(flag("--output-dir", {"--output"}), o->output, "output folder")->required();
  sub->add_option(flag("--shards"), o->shards, "train shards (default 4)")->check(CLI::Range(1, 100000));
  sub->add_option(flag("--test-fraction"), o->test_fraction, "held-out fraction of documents (default 0)")
      ->check(CLI::Range(0.0, 0.9));
  sub->add_option(flag("--seed"), o->seed, "seed for the held-out choice");
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  sub->add_option("--stream-above-mb", o->stream_above_mb,
                  "text files larger than this are read paragraph by paragraph (bounded memory; default 64)");
  sub->callback([o]() {
    std::vector<std::string> files, dumps;
    auto ends = [](const std::string& p, const char* suf) {
      const size_t n = std::strlen(suf);
      return p.size() >= n && p.compare(p.size() - n, n, suf) == 0;
    };
    for (const auto& p : o->inputs) {
      if (ends(p, ".xml") || ends(p, ".xml.bz2") || ends(p, ".bz2")) {
        BERTCC_CHECK(fs::is_regular_file(p), p, ": no such file");
        dumps.push_back(p);
      } else {
        collect(p, files);
      }
    }
    BERTCC_CHECK(!files.empty() || !dumps.empty(), "prep-corpus: no input files");
    for (const auto& p : o->inputs)  // (the shards go to OUTPUT/train and OUTPUT/test)
      for (const char* sub : {"", "train", "test"})
        check_output_not_input((fs::path(o->output) / sub).string(), "--output-dir", p, "--input", /*input_read_whole=*/true);
    const int n_test = o->test_fraction > 0 ? std::max(1, static_cast<int>(o->shards * o->test_fraction + 0.5)) : 0;
    // The folders this run makes (the output folder itself, too, when it is new): removed again,
    // innermost first, when the run fails, so that a refused run leaves nothing behind.
    std::vector<fs::path> made;
    for (const fs::path& d : {fs::path(o->output), fs::path(o->output) / "train", fs::path(o->output) / "test"}) {
      if (d.filename() == "test" && !n_test) break;
      if (!fs::exists(d)) made.push_back(d);
      fs::create_directories(d);
    }
    auto open_shards = [&](const char* split, int n) {
      std::vector<Shard> v(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "part-%05d.txt", i);
        v[i].final_path = (fs::path(o->output) / split / name).string();
        v[i].tmp = v[i].final_path + ".tmp." + std::to_string(::getpid());
        v[i].f = std::fopen(v[i].tmp.c_str(), "wb");
        BERTCC_CHECK(v[i].f, v[i].tmp, ": cannot create");
      }
      return v;
    };
    std::vector<Shard> train = open_shards("train", o->shards), test = open_shards("test", n_test);
    struct Cleanup {  // on any error, no temporary shard and no folder this run made is left behind
      std::vector<Shard>*a, *b;
      const std::vector<fs::path>* made;
      bool done = false;
      ~Cleanup() {
        if (done) return;
        for (auto* pool : {a, b})
          for (auto& s : *pool) {
            if (s.f) std::fclose(s.f);
            std::remove(s.tmp.c_str());
          }
        std::error_code ec;  // (fs::remove removes an empty folder only)
        for (auto it = made->rbegin(); it != made->rend(); ++it) fs::remove(*it, ec);
      }
    } cleanup{&train, &test, &made};
    const int nt = o->threads > 0 ? o->threads : 1;
    const size_t batch = static_cast<size_t>(std::max(4, 4 * nt));
    const bool tty = ::isatty(2);
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t in_bytes = 0, total_bytes = 0;
    for (const auto& f : files) total_bytes += fs::file_size(f);
    int64_t sentences = 0, invalid = 0, empty_docs = 0, docs = 0;
    Rng pick{o->seed, 0};
    // The smallest shard of the train or held-out pool takes the next document.
    auto pick_shard = [&]() -> Shard& {
      const bool held_out = n_test && u32_to_unit(pick.next_u32()) < o->test_fraction;
      std::vector<Shard>& pool = held_out ? test : train;
      return *std::min_element(pool.begin(), pool.end(),
                               [](const Shard& a, const Shard& b) { return a.bytes < b.bytes; });
    };
    auto write_doc = [&](const std::string& text, int64_t nsent) {
      if (text.empty()) {
        ++empty_docs;
        return;
      }
      ++docs;
      sentences += nsent;
      Shard& s = pick_shard();
      if (s.docs) std::fputc('\n', s.f);  // blank line between documents
      std::fwrite(text.data(), 1, text.size(), s.f);
      s.bytes += text.size();
      ++s.docs;
    };
    // Files above kStreamBytes are read paragraph by paragraph, so memory stays bounded.
    const uintmax_t kStreamBytes = static_cast<uintmax_t>(o->stream_above_mb * 1048576.0);
    auto stream_doc = [&](const std::string& path) {
      std::ifstream in;
      open_text_input(in, path);
      Shard* shard = nullptr;
      int64_t n = 0, bad = 0;
      std::string line, para;
      auto flush = [&]() {
        if (para.empty()) return;
        bad += sanitize_utf8(para);
        for (const auto& sent : split_sentences(para)) {
          if (!shard) {
            shard = &pick_shard();
            if (shard->docs) std::fputc('\n', shard->f);
            ++shard->docs;
          }
          std::fwrite(sent.data(), 1, sent.size(), shard->f);
          std::fputc('\n', shard->f);
          shard->bytes += sent.size() + 1;
          ++n;
        }
        para.clear();
      };
      while (std::getline(in, line)) {
        const bool blank = line.find_first_not_of(" \t\r\f\v") == std::string::npos;
        if (blank) {
          flush();
        } else {
          if (!para.empty()) para.push_back(' ');
          para += line;
        }
      }
      BERTCC_CHECK(!in.bad(), path, ": read error");
      flush();
      invalid += bad;
      if (bad) std::cerr << "prep-corpus: " << path << ": " << bad << " invalid UTF-8 sequence(s) replaced\n";
      if (n) {
        ++docs;
        sentences += n;
      } else {
        ++empty_docs;
      }
    };
    for (size_t b0 = 0; b0 < files.size(); b0 += batch) {
      const size_t b1 = std::min(files.size(), b0 + batch);
      std::vector<std::string> out(b1 - b0);
      std::vector<int64_t> nsent(b1 - b0, 0), bad(b1 - b0, 0);
      std::vector<std::string> err(b1 - b0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
      for (size_t k = b0; k < b1; ++k) {
        if (fs::file_size(files[k]) > kStreamBytes) continue;  // streamed below, in order
        try {
          std::string text = read_text_file(files[k]);
          bad[k - b0] = sanitize_utf8(text);
          for (const auto& s : segment_document(text)) {
            out[k - b0] += s;
            out[k - b0] += '\n';
            ++nsent[k - b0];
          }
        } catch (const std::exception& e) {
          err[k - b0] = e.what();
        }
      }
      for (size_t k = b0; k < b1; ++k) {
        BERTCC_CHECK(err[k - b0].empty(), err[k - b0]);
        in_bytes += fs::file_size(files[k]);
        invalid += bad[k - b0];
        if (bad[k - b0])
          std::cerr << "prep-corpus: " << files[k] << ": " << bad[k - b0] << " invalid UTF-8 sequence(s) replaced\n";
        if (fs::file_size(files[k]) > kStreamBytes) {
          stream_doc(files[k]);
          continue;
        }
        write_doc(out[k - b0], nsent[k - b0]);
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double rate = in_bytes / std::max(secs, 1e-9);
      char line[200];
      std::snprintf(line, sizeof line, "prep-corpus: %zu/%zu files, %.1f/%.1f MB, %.1f MB/s, ETA %.0f s", b1,
                    files.size(), in_bytes / 1e6, total_bytes / 1e6, rate / 1e6,
                    (total_bytes - in_bytes) / std::max(rate, 1.0));
      if (tty)
        std::cerr << "\r" << line << std::flush;
      else if (b1 == files.size() || (b0 / batch) % 50 == 0)
        std::cerr << line << "\n";
    }
    if (tty && !files.empty()) std::cerr << "\n";
    for (const auto& dump : dumps) {
      std::vector<std::string> batch_text;
      WikiStats ws;
      uint64_t done = 0, total = 1;
      const auto wt0 = std::chrono::steady_clock::now();
      auto report = [&](bool last) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - wt0).count();
        const double rate = done / std::max(secs, 1e-9);
        char line[300];
        std::snprintf(line, sizeof line, "prep-corpus: %s: %.1f/%.1f MB, %lld articles, %.1f MB/s, ETA %.0f s",
                      dump.c_str(), done / 1e6, total / 1e6, static_cast<long long>(docs), rate / 1e6,
                      (total - std::min(done, total)) / std::max(rate, 1.0));
        if (tty) std::cerr << "\r" << line << std::flush;
        else if (last) std::cerr << line << "\n";
      };
      auto run_batch = [&]() {
        std::vector<std::string> out(batch_text.size());
        std::vector<int64_t> nsent(batch_text.size(), 0), bad(batch_text.size(), 0);
#pragma omp parallel for schedule(dynamic, 8) num_threads(nt)
        for (size_t k = 0; k < batch_text.size(); ++k) {
          bad[k] = sanitize_utf8(batch_text[k]);
          for (const auto& s : segment_document(wikitext_to_plain(batch_text[k]))) {
            out[k] += s;
            out[k] += '\n';
            ++nsent[k];
          }
        }
        for (size_t k = 0; k < out.size(); ++k) {
          invalid += bad[k];
          write_doc(out[k], nsent[k]);
        }
        batch_text.clear();
        report(false);
      };
      read_wikipedia_dump(
          dump,
          [&](const std::string&, const std::string& wikitext) {
            batch_text.push_back(wikitext);
            if (batch_text.size() >= 512) run_batch();
          },
          &ws, [&](uint64_t d, uint64_t t) {
            done = d;
            total = std::max<uint64_t>(t, 1);
          });
      run_batch();
      report(true);
      if (tty) std::cerr << "\n";
      std::cerr << "prep-corpus: " << dump << ": " << ws.pages << " pages, " << ws.articles << " articles, "
                << ws.redirects << " redirects and " << ws.other_namespaces << " non-article pages skipped\n";
    }
    for (auto* pool : {&train, &test})
      for (auto& s : *pool) {
        const bool ok = std::fflush(s.f) == 0 && ::fsync(fileno(s.f)) == 0;
        std::fclose(s.f);
        s.f = nullptr;
        BERTCC_CHECK(ok, s.tmp, ": write failed");
      }
    // An empty shard would only fail the next step (create-pretraining-data: "no text"): refused
    // here, before anything is renamed into place, saying what to change.
    int64_t held_out = 0;
    for (const auto& s : test) held_out += s.docs;
    BERTCC_CHECK(!n_test || held_out > 0, "prep-corpus: --test-fraction ", o->test_fraction, " held out none of the ",
                 docs, " documents (each one is held out with that probability): raise it, give more documents, "
                 "or leave it at 0");
    for (const auto& [pool, split, n_docs] :
         {std::tuple{&train, "train", docs - held_out}, std::tuple{&test, "test", held_out}})
      for (const auto& s : *pool)
        BERTCC_CHECK(s.docs > 0, "prep-corpus: ", s.final_path, " would be empty: ", n_docs, " ", split,
                     " document(s) for ", pool->size(), " ", split, " shard(s); ",
                     std::string(split) == "train" ? "pass --shards " + std::to_string(std::max<int64_t>(1, n_docs)) +
                                                         " or fewer"
                                                   : std::string("pass fewer --shards or a larger --test-fraction"));
    for (auto* pool : {&train, &test})
      for (auto& s : *pool)
        BERTCC_CHECK(std::rename(s.tmp.c_str(), s.final_path.c_str()) == 0, s.final_path, ": rename failed");
    cleanup.done = true;
    std::cout << "prep-corpus: " << docs << " documents"
              << (n_test ? " (" + std::to_string(held_out) + " held out)" : "") << ", " << sentences << " sentences -> " << train.size()
              << " train shard(s)" << (n_test ? " + " + std::to_string(test.size()) + " test shard(s)" : "") << " in "
              << o->output << (empty_docs ? " (" + std::to_string(empty_docs) + " empty documents skipped)" : "")
              << (invalid ? " (" + std::to_string(invalid) + " invalid UTF-8 sequences replaced)" : "") << "\n";
  });
}

}  // namespace bertcc::tools
