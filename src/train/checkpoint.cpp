#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bertcc/config.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/safetensors.h"

namespace bertcc {
namespace fs = std::filesystem;

namespace {

std::string fnv64(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void fsync_path(const std::string& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

int64_t step_of(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.rfind("step_", 0) != 0 || n.size() == 5 || n.size() > 23) return -1;
  for (size_t i = 5; i < n.size(); ++i)
    if (n[i] < '0' || n[i] > '9') return -1;  // step_N only (not step_N.old)
  return std::stoll(n.substr(5));
}

}  // namespace

void replace_dir(const fs::path& from, const fs::path& to) {
  if (!fs::exists(to)) {
    fs::rename(from, to);
    return;
  }
  // `to` exists (a step saved again): swap the two atomically, then delete the old one, so that a
  // kill at any moment leaves a complete `to`.
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(from);
    return;
  }
  // No RENAME_EXCHANGE on this file system: move the old one aside first; a kill in between
  // leaves it as `<to>.old`, which resuming puts back (restore_replaced_dirs).
  const fs::path old = to.string() + ".old";
  fs::remove_all(old);
  fs::rename(to, old);
  fs::rename(from, to);
  fs::remove_all(old);
}

void restore_replaced_dirs(const fs::path& root) {
  std::vector<fs::path> olds;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() > 4 && n.compare(n.size() - 4, 4, ".old") == 0) olds.push_back(e.path());
  }
  for (const fs::path& old : olds) {
    const fs::path to = old.parent_path() / old.stem();  // strips ".old"
    if (fs::exists(to)) {
      fs::remove_all(old);
    } else {
      std::cerr << "checkpoint: restoring " << to.string() << " (a re-save was interrupted)\n";
      fs::rename(old, to);
    }
  }
}

void save_checkpoint(const std::string& output_dir, const Bert& model, const AdamState& opt, const TrainerState& st,
                     const std::string& vocab_path, int64_t keep) {
  save_checkpoint(output_dir, {{"", const_cast<Bert*>(&model), const_cast<AdamState*>(&opt)}}, st, vocab_path, keep);
}

void check_weights_finite(const Bert& model, const std::string& what) {
  const ParamVector& w = model.params();
  for (const ParamEntry& e : model.table().entries())
    for (size_t i = e.offset; i < e.offset + e.numel; ++i)
      BERTCC_CHECK(std::isfinite(w[i]), what, ": the weights are not finite ('", e.name, "' holds ", w[i],
                   "): the run diverged (lower --learning-rate?)");
}

void save_checkpoint(const std::string& output_dir, const std::vector<CheckpointPart>& parts, const TrainerState& st,
                     const std::string& vocab_path, int64_t keep) {
  const int64_t global = st.step + st.step_offset;
  for (const CheckpointPart& p : parts)
    check_weights_finite(*p.model, "not writing checkpoint step_" + std::to_string(global) + " in " + output_dir +
                                       "/checkpoints (the newest one there is the last good state)");
  const fs::path root = fs::path(output_dir) / "checkpoints";
  fs::create_directories(root);
  const fs::path final_dir = root / ("step_" + std::to_string(global));
  const fs::path tmp = root / (".step_" + std::to_string(global) + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<std::string> files;  // checksummed, relative to the checkpoint
  for (const CheckpointPart& p : parts) {
    const fs::path d = p.dir.empty() ? tmp : tmp / p.dir;
    save_model_dir(*p.model, d.string(), vocab_path);
    const AdamState& opt = *p.opt;
    std::vector<StWrite> w{{"exp_avg", {static_cast<int64_t>(opt.m.size())}, opt.m.data()},
                           {"exp_avg_sq", {static_cast<int64_t>(opt.v.size())}, opt.v.data()}};
    write_safetensors((d / "optimizer.safetensors").string(), w);
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json"})
      files.push_back(p.dir.empty() ? std::string(f) : p.dir + "/" + f);
  }
  nlohmann::ordered_json j;
  j["step"] = st.step;
  j["optimizer_step"] = parts.front().opt->step;
  j["rng"] = {{"seed", st.rng.seed}, {"offset", st.rng.offset}};
  j["cursor"] = {{"epoch", st.cursor.epoch}, {"shard_pos", st.cursor.shard_pos}, {"row", st.cursor.row}};
  j["loss_scale"] = st.loss_scale;
  j["clean_steps"] = st.clean_steps;
  j["phase"] = st.phase;
  j["step_offset"] = st.step_offset;
  if (st.global_batch > 0) j["global_batch_size"] = st.global_batch;
  j["best_score"] = st.best_score;
  if (!st.best_metrics.empty()) j["best_metrics"] = nlohmann::ordered_json::parse(st.best_metrics);
  if (st.totals.seqs > 0)
    j["totals"] = {{"train_seconds", st.totals.train_seconds},
                   {"seqs", st.totals.seqs},
                   {"padded_tokens", st.totals.padded_tokens},
                   {"real_tokens", st.totals.real_tokens}};
  for (const std::string& f : files) j["checksums"][f] = fnv64(read_file((tmp / f).string()));
  // The state's own checksum: over its text without this last field, so a flipped byte anywhere
  // in trainer_state.json is caught too.
  j["state_checksum"] = fnv64(j.dump(2));
  write_file_atomic((tmp / "trainer_state.json").string(), j.dump(2) + "\n");
  fsync_path(tmp.string());
  replace_dir(tmp, final_dir);
  fsync_path(root.string());
  // Keep the newest `keep` checkpoints.
  std::vector<std::pair<int64_t, fs::path>> all;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && step_of(e.path()) >= 0) all.emplace_back(step_of(e.path()), e.path());
  std::sort(all.rbegin(), all.rend());
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) fs::remove_all(all[i].second);
}

// Partial saves from a killed run (".step_N" folders) are never resumed from.
static void remove_partial_saves(const fs::path& root, const char* who) {
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind(".step_", 0) == 0) {
      std::cerr << who << ": removing partial checkpoint " << e.path().string() << "\n";
      fs::remove_all(e.path());
    }
}

bool load_latest_checkpoint(const std::string& output_dir, Bert& model, AdamState& opt, TrainerState& st,
                            const char* who, bool lead, bool trust_unverified) {
  return load_latest_checkpoint(output_dir, {{"", &model, &opt}}, st, who, lead, trust_unverified);
}

namespace {

// A checkpoint that cannot be resumed: damaged (a checksum differs, a file is missing or
// unreadable) or unverified (a checksum is missing). Skipped in favour of an older one.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string rel(const fs::path& dir, const std::string& f) { return (dir / f).string(); }

// Integrity before content: the checksums of trainer_state.json (its own) and of every file it
// lists are checked before anything in them is interpreted, so that a flipped bit anywhere (a
// config.json that now names another hidden size, an edited step) is damage, not a different run.
// A checkpoint without its checksums cannot be verified and is refused unless `trust_unverified`.
// Returns the state (state_checksum removed).
nlohmann::ordered_json verified_state(const fs::path& dir, const std::vector<CheckpointPart>& parts,
                                      bool trust_unverified, const char* who, bool lead) {
  const std::string state_path = rel(dir, "trainer_state.json");
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(read_file(state_path, kMaxConfigBytes, "trainer state"));
  } catch (const nlohmann::json::exception& e) {
    throw Refused(state_path + ": not valid JSON (damaged): " + e.what());
  } catch (const std::exception& e) {
    throw Refused(e.what());
  }
  if (!j.is_object()) throw Refused(state_path + ": not a JSON object (damaged)");
  std::vector<std::string> unverified;  // what has no checksum
  if (j.contains("state_checksum")) {
    if (!j.at("state_checksum").is_string()) throw Refused(state_path + ": state_checksum is not a string (damaged)");
    const std::string want = j.at("state_checksum").get<std::string>();
    j.erase("state_checksum");
    if (fnv64(j.dump(2)) != want) throw Refused(state_path + ": checksum mismatch");
  } else {
    unverified.push_back("trainer_state.json (no state_checksum)");
  }
  const bool has_sums = j.contains("checksums") && j.at("checksums").is_object();
  if (j.contains("checksums") && !has_sums) throw Refused(state_path + ": checksums is not an object (damaged)");
  if (has_sums)
    for (auto it = j.at("checksums").begin(); it != j.at("checksums").end(); ++it) {
      const std::string& f = it.key();
      if (f.empty() || f[0] == '/' || f.find("..") != std::string::npos || !it.value().is_string())
        throw Refused(state_path + ": bad checksum entry '" + f + "' (damaged)");
      std::string bytes;
      try {
        bytes = read_file(rel(dir, f));
      } catch (const std::exception& e) {
        throw Refused(e.what());
      }
      if (fnv64(bytes) != it.value().get<std::string>()) throw Refused(rel(dir, f) + ": checksum mismatch");
    }
  // Every file resuming reads must be covered. (A part missing altogether is another kind of
  // checkpoint: the caller stops for that after this check, which may find nothing to verify.)
  for (const CheckpointPart& p : parts) {
    const fs::path pd = p.dir.empty() ? dir : dir / p.dir;
    if (!fs::exists(pd / "config.json")) continue;
    for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors"}) {
      const std::string key = p.dir.empty() ? std::string(f) : p.dir + "/" + f;
      if (!has_sums || !j.at("checksums").contains(key)) unverified.push_back(key + " (no checksum)");
    }
  }
  if (!unverified.empty()) {
    std::string list;
    for (const std::string& u : unverified) list += (list.empty() ? "" : ", ") + u;
    if (!trust_unverified)
      throw Refused(state_path + ": cannot be verified: " + list +
                    "; refused (--trust-unverified-checkpoint resumes such a checkpoint anyway)");
    if (lead)
      std::cerr << who << ": warning: " << dir.string() << ": resuming without verifying " << list
                << " (--trust-unverified-checkpoint)\n";
  }
  return j;
}

}  // namespace

bool load_latest_checkpoint(const std::string& output_dir, const std::vector<CheckpointPart>& parts, TrainerState& st,
                            const char* who, bool lead, bool trust_unverified) {
  const fs::path root = fs::path(output_dir) / "checkpoints";
  if (!fs::is_directory(root)) return false;
  if (lead) {
    restore_replaced_dirs(root);
    remove_partial_saves(root, who);
  }
  std::vector<std::pair<int64_t, fs::path>> all;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && step_of(e.path()) >= 0) all.emplace_back(step_of(e.path()), e.path());
  std::sort(all.rbegin(), all.rend());
  std::vector<std::string> refused;  // "step_N: why", newest first
  for (const auto& [step, dir] : all) {
    try {
      // 1. Integrity: checksums before any content is read.
      auto j = verified_state(dir, parts, trust_unverified, who, lead);
      // 2. A verified checkpoint of another model is not a damaged one: skipping it would restart
      // at step 0 and overwrite the run's checkpoints, so it stops the run (nothing is touched).
      for (const CheckpointPart& p : parts) {
        const fs::path pd = p.dir.empty() ? dir : dir / p.dir;
        if (!fs::exists(pd / "config.json")) {
          // A BERT checkpoint where an ELECTRA run expects discriminator/ and generator/, or the reverse.
          const bool other_kind =
              p.dir.empty() ? fs::exists(dir / "discriminator" / "config.json") : fs::exists(dir / "config.json");
          BERTCC_CHECK(!other_kind, dir.string(), ": the checkpoint ",
                       p.dir.empty() ? "holds an ELECTRA generator and discriminator but this run trains one model"
                                     : "holds one model but this run trains ELECTRA (" + p.dir + "/ expected)",
                       "; refusing to resume (nothing was changed: use --model-type as the run that wrote it, or "
                       "another --output-dir)");
          throw Refused((pd / "config.json").string() + ": missing (damaged)");
        }
        BertConfig c;
        try {
          c = load_config((pd / "config.json").string());
        } catch (const std::exception& e) {
          throw Refused(e.what());
        }
        const BertConfig& m = p.model->config();
        const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
            {"vocab_size", {c.vocab_size, m.vocab_size}},
            {"hidden_size", {c.hidden_size, m.hidden_size}},
            {"num_hidden_layers", {c.num_hidden_layers, m.num_hidden_layers}},
            {"num_attention_heads", {c.num_attention_heads, m.num_attention_heads}},
            {"intermediate_size", {c.intermediate_size, m.intermediate_size}},
            {"max_position_embeddings", {c.max_position_embeddings, m.max_position_embeddings}},
            {"type_vocab_size", {c.type_vocab_size, m.type_vocab_size}},
            {"embedding_size", {c.embedding_dim(), m.embedding_dim()}},
            {"num_labels", {c.num_labels(), m.num_labels()}}};
        for (const auto& [name, v] : fields)
          BERTCC_CHECK(
              v.first == v.second, (pd / "config.json").string(), ": the checkpoint's ", name, " is ", v.first,
              " but this run's model has ", v.second,
              "; refusing to resume (nothing was changed: use the checkpoint's model, or another --output-dir)");
      }
      // 3. Content. An error here (a verified file that still does not parse) skips the checkpoint too.
      try {
        for (const CheckpointPart& p : parts) {
          const fs::path pd = p.dir.empty() ? dir : dir / p.dir;
          load_weights(*p.model, (pd / "model.safetensors").string());
          SafetensorsFile f((pd / "optimizer.safetensors").string());
          const StTensor* m = f.find("exp_avg");
          const StTensor* v = f.find("exp_avg_sq");
          const size_t total = p.model->table().total();
          BERTCC_CHECK(m && v && m->numel() == total && v->numel() == total, (pd / "optimizer.safetensors").string(),
                       ": moments do not match the model");
          AdamState& opt = *p.opt;
          opt.m.resize(m->numel());
          opt.v.resize(v->numel());
          f.read_f32(*m, opt.m.data());
          f.read_f32(*v, opt.v.data());
          opt.step = j.at("optimizer_step").get<int64_t>();
          BERTCC_CHECK(opt.step >= 0, (dir / "trainer_state.json").string(), ": negative step");
        }
        st.step = j.at("step").get<int64_t>();
        BERTCC_CHECK(st.step >= 0, (dir / "trainer_state.json").string(), ": negative step");
        st.rng = Rng{j.at("rng").at("seed").get<uint64_t>(), j.at("rng").at("offset").get<uint64_t>()};
        st.cursor = {j.at("cursor").at("epoch").get<int64_t>(), j.at("cursor").at("shard_pos").get<int64_t>(),
                     j.at("cursor").at("row").get<int64_t>()};
        BERTCC_CHECK(st.cursor.epoch >= 0 && st.cursor.shard_pos >= 0 && st.cursor.row >= 0,
                     (dir / "trainer_state.json").string(), ": negative data cursor");
        st.loss_scale = j.at("loss_scale").get<double>();
        st.clean_steps = j.value("clean_steps", int64_t{0});
        st.phase = j.value("phase", 1);
        st.step_offset = j.value("step_offset", int64_t{0});
        st.global_batch = j.value("global_batch_size", int64_t{0});
        st.best_score = j.value("best_score", -1e300);
        st.best_metrics = j.contains("best_metrics") ? j.at("best_metrics").dump() : "";
        st.totals = {};
        if (j.contains("totals")) {
          const auto& t = j.at("totals");
          st.totals = {t.at("train_seconds").get<double>(), t.at("seqs").get<int64_t>(),
                       t.at("padded_tokens").get<int64_t>(), t.at("real_tokens").get<int64_t>()};
        }
      } catch (const std::exception& e) {
        throw Refused(e.what());
      }
      if (lead)
        std::cerr << who << ": resuming from " << dir.string() << " ("
                  << (st.phase != 1 ? "phase " + std::to_string(st.phase) + ", " : "") << "step "
                  << st.step + st.step_offset << ")\n";
      return true;
    } catch (const Refused& e) {
      if (lead) std::cerr << who << ": warning: skipping checkpoint " << dir.string() << ": " << e.what() << "\n";
      refused.push_back(dir.filename().string() + ": " + e.what());
    }
  }
  if (!refused.empty()) {
    // Every checkpoint refused: starting at step 0 would overwrite them (and a damaged newest one
    // may be one byte from good). Stop and leave them as they are.
    std::string why;
    for (const std::string& r : refused) why += "\n  " + r;
    fail(who, ": --resume-from-checkpoint: none of the ", refused.size(), " checkpoint(s) in ", root.string(),
         " can be resumed (left as they are):", why,
         "\n(restore one from a backup; --trust-unverified-checkpoint resumes one that lacks its checksums; or use "
         "another --output-dir to start afresh)");
  }
  return false;
}

}  // namespace bertcc
