// safetensors, config, HDF5 shards and model directories: round trips and bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bertcc/config.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/safetensors.h"
#include "test_files.h"
#include "test_util.h"

using namespace bertcc;
namespace fs = std::filesystem;

namespace {

using bertcc::testing::error_of;
using bertcc::testing::TmpDir;

void write_raw(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 29;
  c.hidden_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 3;
  c.intermediate_size = 17;
  c.max_position_embeddings = 16;
  return c;
}

}  // namespace

TEST(Safetensors, RoundTripAllFloatTypes) {
  TmpDir d;
  auto a = bertcc::testing::randn(3 * 5, 1), b = bertcc::testing::randn(7, 2);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const std::string p = d / "x.safetensors";
    write_safetensors(p, {{"a", {3, 5}, a.data()}, {"b.c", {7}, b.data()}}, t);
    SafetensorsFile f(p);
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const StTensor* ta = f.find("a");
    ASSERT_TRUE(ta);
    EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 5}));
    std::vector<float> back(15);
    f.read_f32(*ta, back.data());
    for (size_t i = 0; i < back.size(); ++i) {
      const float want = t == DType::F32    ? a[i]
                         : t == DType::BF16 ? bf16_to_f32(f32_to_bf16(a[i]))
                                            : f16_to_f32(f32_to_f16(a[i]));
      EXPECT_EQ(back[i], want);
    }
  }
}

TEST(Safetensors, BadFilesNameTheProblem) {
  TmpDir d;
  auto a = bertcc::testing::randn(64, 1);
  const std::string good = d / "good.safetensors";
  write_safetensors(good, {{"weight", {8, 8}, a.data()}});
  const std::string bytes = read_file(good);

  write_raw(d / "trunc.safetensors", bytes.substr(0, bytes.size() - 10));
  auto e = error_of([&] { SafetensorsFile f(d / "trunc.safetensors"); });
  EXPECT_NE(e.find("'weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  write_raw(d / "tiny.safetensors", "abc");
  e = error_of([&] { SafetensorsFile f(d / "tiny.safetensors"); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  std::string badjson = bytes;
  badjson[8] = 'x';
  write_raw(d / "json.safetensors", badjson);
  e = error_of([&] { SafetensorsFile f(d / "json.safetensors"); });
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  e = error_of([&] { SafetensorsFile f(d / "missing.safetensors"); });
  EXPECT_NE(e.find("missing.safetensors"), std::string::npos) << e;
}

TEST(Config, ParsesHfAndGoogleAndNamesBadFields) {
  TmpDir d;
  write_raw(d / "config.json",
            R"({"vocab_size": 30, "hidden_size": 12, "num_hidden_layers": 1, "num_attention_heads": 3,
                "intermediate_size": 20, "hidden_act": "gelu_new", "max_position_embeddings": 64,
                "type_vocab_size": 2, "layer_norm_eps": 1e-5})");
  BertConfig c = load_config(d / "config.json");
  EXPECT_EQ(c.vocab_size, 30);
  EXPECT_EQ(c.activation(), Activation::GeluTanh);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-5f);
  // Google's bert_config.json has no layer_norm_eps: BERT's 1e-12 applies.
  write_raw(d / "bert_config.json",
            R"({"vocab_size": 30, "hidden_size": 12, "num_hidden_layers": 1, "num_attention_heads": 3,
                "intermediate_size": 20, "hidden_act": "gelu"})");
  EXPECT_FLOAT_EQ(load_config(d / "bert_config.json").layer_norm_eps, 1e-12f);

  write_raw(d / "bad1.json", R"({"vocab_size": 30, "hidden_size": 13, "num_hidden_layers": 1,
                                 "num_attention_heads": 3, "intermediate_size": 20})");
  auto e = error_of([&] { load_config(d / "bad1.json"); });
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;
  EXPECT_NE(e.find("bad1.json"), std::string::npos) << e;
  write_raw(d / "bad2.json", R"({"vocab_size": 30, "hidden_size": 12, "num_hidden_layers": 1,
                                 "num_attention_heads": 3})");
  e = error_of([&] { load_config(d / "bad2.json"); });
  EXPECT_NE(e.find("intermediate_size"), std::string::npos) << e;
  write_raw(d / "bad3.json", R"({"vocab_size": 30, "hidden_size": 12, "num_hidden_layers": 1,
                                 "num_attention_heads": 3, "intermediate_size": 20, "hidden_act": "relu"})");
  e = error_of([&] { load_config(d / "bad3.json"); });
  EXPECT_NE(e.find("relu"), std::string::npos) << e;
  EXPECT_EQ(config_from_name_or_path("bert-base").hidden_size, 768);
  EXPECT_EQ(config_from_name_or_path("bert-large").num_hidden_layers, 24);
  EXPECT_EQ(config_from_name_or_path("bert-mini").num_attention_heads, 4);
  EXPECT_NE(error_of([&] { config_from_name_or_path("bert-huge"); }).find("bert-huge"), std::string::npos);
}

TEST(ModelDir, SaveLoadRoundTripAndErrors) {
  TmpDir d;
  Bert m(tiny_config(), Heads::PreTraining);
  m.init_weights(3);
  save_model_dir(m, d / "model");
  auto back = load_model_dir(d / "model", Heads::PreTraining);
  EXPECT_EQ(back->params(), m.params());
  // Encoder-only load of a pre-training checkpoint skips cls.* tensors.
  auto enc = load_model_dir(d / "model", Heads::None);
  EXPECT_EQ(enc->table().total(), enc->table().total());
  EXPECT_EQ(0, std::memcmp(enc->params().data(), m.params().data(), sizeof(float) * enc->table().total()));

  // Missing tensor.
  std::vector<StWrite> w;
  for (const auto& e : m.table().entries())
    if (e.name != "bert.pooler.dense.bias") w.push_back({e.name, e.shape, m.params().data() + e.offset});
  write_safetensors(d / "missing.safetensors", w);
  auto e = error_of([&] { load_weights(*back, d / "missing.safetensors"); });
  EXPECT_NE(e.find("missing tensor 'bert.pooler.dense.bias'"), std::string::npos) << e;
  // Unknown tensor.
  w.push_back({"bert.pooler.dense.bias", {12}, m.params().data()});
  w.push_back({"bert.encoder.layer.7.output.dense.weight", {12}, m.params().data()});
  write_safetensors(d / "unknown.safetensors", w);
  e = error_of([&] { load_weights(*back, d / "unknown.safetensors"); });
  EXPECT_NE(e.find("unknown tensor 'bert.encoder.layer.7.output.dense.weight'"), std::string::npos) << e;
  // Shape mismatch.
  w.pop_back();
  w[0].shape = {29, 11};
  write_safetensors(d / "shape.safetensors", w);
  e = error_of([&] { load_weights(*back, d / "shape.safetensors"); });
  EXPECT_NE(e.find("'bert.embeddings.word_embeddings.weight' has shape [29,11], expected [29,12]"), std::string::npos)
      << e;
  // No model file at all.
  fs::create_directories(d / "empty");
  e = error_of([&] { load_model_dir(d / "empty", Heads::None); });
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
}

TEST(ModelDir, AcceptsBertModelNamesWithoutPrefix) {
  TmpDir d;
  Bert m(tiny_config(), Heads::None);
  m.init_weights(5);
  std::vector<StWrite> w;
  for (const auto& e : m.table().entries())
    w.push_back({e.name.substr(5), e.shape, m.params().data() + e.offset});  // strip "bert."
  write_safetensors(d / "m.safetensors", w);
  Bert back(tiny_config(), Heads::None);
  load_weights(back, d / "m.safetensors");
  EXPECT_EQ(back.params(), m.params());
  EXPECT_EQ(canonical_param_name("encoder.layer.0.output.LayerNorm.gamma"),
            "bert.encoder.layer.0.output.LayerNorm.weight");
  EXPECT_EQ(canonical_param_name("bert.embeddings.LayerNorm.beta"), "bert.embeddings.LayerNorm.bias");
  EXPECT_EQ(canonical_param_name("bert.embeddings.position_ids"), "");
}

TEST(PretrainShard, RoundTripAndNvidiaLabelRule) {
  TmpDir d;
  PretrainShard s;
  s.N = 2;
  s.S = 6;
  s.P = 3;
  s.input_ids = {2, 5, 7, 9, 3, 0, 2, 8, 8, 3, 0, 0};
  s.input_mask = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0};
  s.segment_ids = {0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  s.masked_lm_positions = {1, 3, 0, 2, 1, 3};  // row 1 has no terminating 0: all three count
  s.masked_lm_ids = {11, 12, 13, 21, 22, 23};
  s.next_sentence_labels = {1, 0};
  write_pretrain_shard(d / "s.h5", s);
  PretrainShard r = read_pretrain_shard(d / "s.h5");
  EXPECT_EQ(r.N, 2);
  EXPECT_EQ(r.input_ids, s.input_ids);
  EXPECT_EQ(r.masked_lm_positions, s.masked_lm_positions);
  BertBatch b = make_pretrain_batch(r, 0, 2, "s.h5");
  std::vector<int32_t> want(12, -1);
  want[1] = 11;
  want[3] = 12;  // row 0 stops at the 0 entry (13 is never used)
  want[6 + 2] = 21;
  want[6 + 1] = 22;
  want[6 + 3] = 23;
  EXPECT_EQ(b.mlm_labels, want);
  EXPECT_EQ(b.nsp_labels, (std::vector<int32_t>{1, 0}));

  write_raw(d / "not.h5", "definitely not hdf5");
  EXPECT_NE(error_of([&] { read_pretrain_shard(d / "not.h5"); }).find("not an HDF5 file"), std::string::npos);
  PretrainShard bad = s;
  bad.masked_lm_positions = {1, 3, 0, 2, 9, 3};
  write_pretrain_shard(d / "bad.h5", bad);
  auto e = error_of([&] { make_pretrain_batch(read_pretrain_shard(d / "bad.h5"), 0, 2, "bad.h5"); });
  EXPECT_NE(e.find("masked_lm_positions[1][1] = 9"), std::string::npos) << e;
}

TEST(FileIo, AtomicWriteLeavesNoTemporaries) {
  TmpDir d;
  write_file_atomic(d / "a.txt", "hello");
  EXPECT_EQ(read_file(d / "a.txt"), "hello");
  int files = 0;
  for (auto& p : fs::directory_iterator(d.path)) files += p.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_file_atomic(d / "no/such/dir/a.txt", "x"), Error);
}

// An output that is an input (the same path, a symbolic or hard link, "dir/" for "dir") or that
// lies inside an input folder read whole is refused naming both; other outputs pass.
TEST(FileIo, OutputThatIsAnInputIsRefused) {
  TmpDir d;
  write_raw(d / "corpus.txt", "a b c\n");
  fs::create_directories(d / "dir");
  fs::create_symlink(d / "corpus.txt", d / "link.txt");
  fs::create_hard_link(d / "corpus.txt", d / "hard.txt");
  const std::string msg =
      error_of([&] { check_output_not_input(d / "corpus.txt", "--output", d / "corpus.txt", "--input"); });
  EXPECT_NE(msg.find("--output " + d / "corpus.txt" + " is the input --input " + d / "corpus.txt"), std::string::npos)
      << msg;
  EXPECT_NE(error_of([&] { check_output_not_input(d / "link.txt", "--output", d / "corpus.txt", "--input"); }), "");
  EXPECT_NE(error_of([&] { check_output_not_input(d / "hard.txt", "--output", d / "corpus.txt", "--input"); }), "");
  EXPECT_NE(error_of([&] { check_output_not_input(d / "dir/../corpus.txt", "--output", d / "corpus.txt", "--input"); }),
            "");
  EXPECT_NE(error_of([&] { check_output_not_input(d / "dir/", "--output-dir", d / "dir", "--init-checkpoint"); }), "");
  EXPECT_NE(error_of([&] { check_output_not_input(d / "dir", "--output-dir", d / "dir/", "--init-checkpoint"); }), "");
  // inside an input folder: refused only where the folder is read whole
  const std::string inside =
      error_of([&] { check_output_not_input(d / "dir/out/v.txt", "--output", d / "dir", "--input", true); });
  EXPECT_NE(inside.find("lies inside the input folder --input " + d / "dir"), std::string::npos) << inside;
  EXPECT_EQ(error_of([&] { check_output_not_input(d / "dir/out", "--output-dir", d / "dir", "--init-checkpoint"); }),
            "");
  EXPECT_EQ(error_of([&] { check_output_not_input(d / "dir2/x", "--output", d / "dir", "--input", true); }), "");
  EXPECT_EQ(error_of([&] { check_output_not_input(d / "new.h5", "--output", d / "corpus.txt", "--input"); }), "");
  EXPECT_EQ(error_of([&] { check_output_not_input(d / "out", "--output-dir", "", "--vocab"); }), "");
  EXPECT_EQ(read_file(d / "corpus.txt"), "a b c\n");
}

// Text input (issue 39): a UTF-8 byte-order mark is skipped; UTF-16 and UTF-32 ones are refused
// naming the file and the encoding (read as bytes they kept their NULs and merged lines); a folder
// is not read as an empty file.
TEST(FileIo, TextByteOrderMarksAndFolders) {
  TmpDir d;
  // the message of f's error contains `want`
  auto says = [](auto f, const std::string& want) {
    const std::string msg = error_of(f);
    if (msg.find(want) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << msg << "' lacks '" << want << "'";
  };
  EXPECT_EQ(text_bom_length("\xEF\xBB\xBFw5", "f"), 3u);
  EXPECT_EQ(text_bom_length("w5", "f"), 0u);
  EXPECT_EQ(text_bom_length("", "f"), 0u);
  EXPECT_EQ(text_bom_length("\xEF\xBB", "f"), 0u);
  EXPECT_TRUE(says([] { text_bom_length(std::string_view("\xFF\xFEw\0", 4), "a.txt"); },
                   "a.txt: the text is UTF-16LE (it starts with the byte-order mark FF FE)"));
  EXPECT_TRUE(says([] { text_bom_length("\xFE\xFF", "b.txt"); }, "b.txt: the text is UTF-16BE"));
  EXPECT_TRUE(says([] { text_bom_length(std::string_view("\xFF\xFE\0\0", 4), "c"); }, "c: the text is UTF-32LE"));
  EXPECT_TRUE(says([] { text_bom_length(std::string_view("\0\0\xFE\xFF", 4), "c"); }, "c: the text is UTF-32BE"));
  EXPECT_TRUE(says([] { text_bom_length("\xFF\xFE", "c"); }, "iconv -f UTF-16 -t UTF-8 c"));
  write_raw(d / "bom.txt", "\xEF\xBB\xBFline\n");
  EXPECT_EQ(read_text_file(d / "bom.txt"), "line\n");
  EXPECT_EQ(read_file(d / "bom.txt"), "\xEF\xBB\xBFline\n");  // bytes as they are (checksums, safetensors)
  std::string first = "\xEF\xBB\xBFw5 w6";
  strip_text_bom(first, "x");
  EXPECT_EQ(first, "w5 w6");
  write_raw(d / "le.txt", std::string("\xFF\xFEw\0\n\0", 6));
  EXPECT_TRUE(says([&] { read_text_file(d / "le.txt"); }, d / "le.txt" + ": the text is UTF-16LE"));
  std::ifstream in;
  EXPECT_TRUE(says([&] { open_text_input(in, d.path.string()); }, ": is a folder, not a file"));
  EXPECT_TRUE(says([&] { read_file(d.path.string()); }, ": is a folder, not a file"));
  // MappedFile (weights files): the same bytes as read_file, the same checks, an empty file empty
  {
    const MappedFile m = MappedFile::map(d / "bom.txt");
    EXPECT_EQ(std::string(m.data(), m.size()), read_file(d / "bom.txt"));
    MappedFile moved;
    moved = MappedFile::map(d / "bom.txt");
    EXPECT_EQ(std::string(moved.data(), moved.size()), "\xEF\xBB\xBFline\n");
    write_raw(d / "empty.bin", "");
    EXPECT_EQ(MappedFile::map(d / "empty.bin").size(), 0u);
    EXPECT_TRUE(says([&] { MappedFile::map(d.path.string()); }, ": is a folder, not a file"));
    EXPECT_TRUE(says([&] { MappedFile::map(d / "bom.txt", 4, "weights file"); }, "more than a weights file can be"));
    EXPECT_TRUE(says([&] { MappedFile::map(d / "none.bin"); }, "none.bin: cannot open"));
  }
  // A reader's ranges: will_read maps them, done_reading drops them from this process (its resident
  // set falls by their size) and they read the same again, from the page cache
  {
    std::string big(size_t{32} << 20, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 2654435761u >> 24);
    write_raw(d / "big.bin", big);
    const MappedFile m = MappedFile::map(d / "big.bin");
    const auto resident = [] {  // bytes, from /proc/self/statm
      std::ifstream f("/proc/self/statm");
      long pages = 0, rss = 0;
      f >> pages >> rss;
      return static_cast<double>(rss) * static_cast<double>(sysconf(_SC_PAGESIZE));
    };
    m.will_read(1000, m.size() - 2000);
    size_t differ = 0;
    for (size_t i = 0; i < big.size(); ++i) differ += m.data()[i] != big[i];
    EXPECT_EQ(differ, 0u);
    const double held = resident();
    m.done_reading(0, m.size());
    EXPECT_GT(held - resident(), 24e6) << "done_reading gave back less than 24 of 32 MB";
    differ = 0;
    for (size_t i = 0; i < big.size(); ++i) differ += m.data()[i] != big[i];
    EXPECT_EQ(differ, 0u);
    m.done_reading(m.size() - 1, 100);  // ranges past the end are cut at it
    m.done_reading(m.size() + 5, 10);
  }
}

#include "bertcc/json_depth.h"
// JSON from stdin or a request body nested deeper than 64 levels is found before it is parsed
// (nlohmann::json's recursion crashed on 100,000 levels); brackets inside strings do not count.
TEST(JsonDepth, DeepNestingIsFoundBeforeParsing) {
  EXPECT_EQ(json_too_deep_at(R"({"a": [[1, 2], {"b": [3]}], "s": "[[[[["})", 4), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(R"({"a": [[1, 2], {"b": [3]}], "s": "[[[[["})", 3), 21u);
  EXPECT_EQ(json_too_deep_at(R"({"a": [[[1]]]})", 3), 8u);
  EXPECT_EQ(json_too_deep_at(R"({"s": "\"[[[[", "t": "]]]]"})", 1), std::string_view::npos);
  const std::string deep = "{\"id\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(json_too_deep_at(deep), 7u + 63u);  // the '[' of level 65
  EXPECT_EQ(json_too_deep_at("{\"id\": " + std::string(63, '[') + std::string(63, ']') + "}"), std::string_view::npos);
}

#include "bertcc/squad_eval.h"
TEST(SquadEval, OfficialNormalization) {
  EXPECT_EQ(squad_normalize("The  Quick, brown fox!"), "quick brown fox");
  EXPECT_EQ(squad_normalize("an apple a day"), "apple day");
  EXPECT_EQ(squad_normalize("theatre and anarchy"), "theatre and anarchy");  // whole words only
  EXPECT_EQ(squad_normalize("the\xE2\x80\x94man"), "\xE2\x80\x94man");       // U+2014 is not \w: "the" is a word
  EXPECT_EQ(squad_normalize("\xC3\x89t\xC3\xA9 (1990)"), "\xC3\xA9t\xC3\xA9 1990");
}

#include "bertcc/glue.h"
TEST(Glue, ReaderQuirksAndErrors) {
  TmpDir d;
  // BOM on the header, an unbalanced quote, CRLF, no final newline.
  write_raw(
      d / "mrpc.tsv",
      "\xEF\xBB\xBFQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n1\t1\t2\tHe said \"hi\tShe left\r\n0\t3\t4\tA\tB");
  const auto ex = read_glue("MRPC", d / "mrpc.tsv");
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].text_a, "He said \"hi");
  EXPECT_EQ(ex[0].label, "1");
  EXPECT_EQ(ex[1].text_b, "B");
  write_raw(d / "bad.tsv", "sentence\tlabel\nonly one field\n");
  auto e = error_of([&] { read_glue("sst-2", d / "bad.tsv"); });
  EXPECT_NE(e.find("bad.tsv:2: expected at least 2 tab-separated fields, found 1"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { read_glue("glue-x", d / "bad.tsv"); }).find("unknown GLUE task 'glue-x'"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 2, 3}, {10, 20, 20, 40}), 1.0);
  EXPECT_DOUBLE_EQ(matthews_corrcoef({"1", "0"}, {"1", "0"}, "1"), 1.0);
}

// Each task's labelled and test layouts as GLUE ships them (header rows, column positions; MNLI's
// dev files carry five annotator labels before gold_label, QQP's test header starts with "id").
TEST(Glue, AllNineTaskLayouts) {
  TmpDir d;
  struct Case {
    const char* task;
    std::string labelled, test;
    const char *a, *b, *label;  // expected first example
  };
  const std::vector<Case> cases = {
      {"cola", "gj04\t1\t\tThe cat sat.\n", "index\tsentence\n0\tThe cat sat.\n", "The cat sat.", "", "1"},
      {"sst-2", "sentence\tlabel\ngood fun \t1\n", "index\tsentence\n0\tgood fun \n", "good fun ", "", "1"},
      {"mrpc", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\tA b.\tC d.\n",
       "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\tA b.\tC d.\n", "A b.", "C d.", "0"},
      {"sts-b",
       "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
       "0\tmain-news\tf\t2012\t1\tnone\tnone\tA b.\tC d.\t3.800\n",
       "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\n"
       "0\tmain-news\tf\t2012\t1\tnone\tnone\tA b.\tC d.\n",
       "A b.", "C d.", "3.800"},
      {"qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n7\t1\t2\tWhy a?\tWhy b?\t1\n",
       "id\tquestion1\tquestion2\n0\tWhy a?\tWhy b?\n", "Why a?", "Why b?", "1"},
      {"mnli",
       "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
       "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
       "0\t1\t1e\tfiction\t( A )\t( B )\t(ROOT A)\t(ROOT B)\tA b.\tC d.\tneutral\tentailment\tneutral\t"
       "neutral\tneutral\tneutral\n",
       "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
       "sentence2_parse\tsentence1\tsentence2\n0\t1\t1e\tfiction\t( A )\t( B )\t(ROOT A)\t(ROOT B)\tA b.\tC d.\n",
       "A b.", "C d.", "neutral"},
      {"qnli", "index\tquestion\tsentence\tlabel\n0\tWho?\tHe did.\tentailment\n",
       "index\tquestion\tsentence\n0\tWho?\tHe did.\n", "Who?", "He did.", "entailment"},
      {"rte", "index\tsentence1\tsentence2\tlabel\n0\tA b.\tC d.\tnot_entailment\n",
       "index\tsentence1\tsentence2\n0\tA b.\tC d.\n", "A b.", "C d.", "not_entailment"},
      {"wnli", "index\tsentence1\tsentence2\tlabel\n0\tA b.\tC d.\t1\n", "index\tsentence1\tsentence2\n0\tA b.\tC d.\n",
       "A b.", "C d.", "1"},
  };
  for (const Case& c : cases) {
    write_raw(d / "l.tsv", c.labelled);
    write_raw(d / "t.tsv", c.test);
    const auto l = read_glue(c.task, d / "l.tsv");
    const auto t = read_glue(c.task, d / "t.tsv", GlueSplit::Test);
    ASSERT_EQ(l.size(), 1u) << c.task;
    ASSERT_EQ(t.size(), 1u) << c.task;
    EXPECT_EQ(l[0].text_a, c.a) << c.task;
    EXPECT_EQ(l[0].text_b, c.b) << c.task;
    EXPECT_EQ(l[0].label, c.label) << c.task;
    EXPECT_EQ(t[0].text_a, c.a) << c.task;
    EXPECT_EQ(t[0].text_b, c.b) << c.task;
    EXPECT_EQ(t[0].label, "") << c.task;
    // The label comes from the label column: one of the task's label names.
    const std::vector<std::string> labels = glue_labels(c.task);
    if (!labels.empty()) {
      EXPECT_NE(std::find(labels.begin(), labels.end(), l[0].label), labels.end()) << c.task;
    }
  }
}

// The real GLUE test files in ../shared: every row read, texts from the right columns.
TEST(Glue, RealTestFiles) {
  const std::string g = std::string(BERTCC_SOURCE_DIR) + "/../shared/data/glue/";
  struct Real {
    const char* task;
    const char* dir;
    size_t rows;
  };
  for (const Real& r : std::vector<Real>{{"cola", "CoLA", 1063},
                                         {"sst-2", "SST-2", 1821},
                                         {"mrpc", "MRPC", 1725},
                                         {"sts-b", "STS-B", 1379},
                                         {"rte", "RTE", 3000}}) {
    const auto t = read_glue(r.task, g + r.dir + "/test.tsv", GlueSplit::Test);
    EXPECT_EQ(t.size(), r.rows) << r.task;
    for (const auto& e : t) {
      EXPECT_FALSE(e.text_a.empty()) << r.task;
      EXPECT_EQ(e.label, "") << r.task;
    }
  }
  // STS-B test rows have nine fields: the sentences are the last two.
  const auto s = read_glue("sts-b", g + "STS-B/test.tsv", GlueSplit::Test);
  EXPECT_EQ(s[0].text_a, "A girl is styling her hair.");
  EXPECT_EQ(s[0].text_b, "A girl is brushing her hair.");
}

TEST(ModelDir, WritesShortestFloatsAndTokenizerFiles) {
  TmpDir d;
  BertConfig c = tiny_config();
  c.classifier_dropout = 0.3f;
  Bert m(c, Heads::PreTraining);
  m.init_weights(3);
  write_raw(d / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n##s\n");
  save_model_dir(m, d / "nested/model", d / "vocab.txt", false);
  const std::string cfg = read_file(d / "nested/model/config.json");
  for (const char* want : {"\"hidden_dropout_prob\": 0.1,", "\"initializer_range\": 0.02,",
                           "\"layer_norm_eps\": 1e-12,", "\"classifier_dropout\": 0.3"})
    EXPECT_NE(cfg.find(want), std::string::npos) << want << " not in\n" << cfg;
  // The shortest decimals parse back to the same floats.
  const BertConfig back = load_config(d / "nested/model/config.json");
  EXPECT_EQ(back.hidden_dropout_prob, c.hidden_dropout_prob);
  EXPECT_EQ(back.layer_norm_eps, c.layer_norm_eps);
  EXPECT_EQ(back.initializer_range, c.initializer_range);

  const auto tc = nlohmann::json::parse(read_file(d / "nested/model/tokenizer_config.json"));
  EXPECT_EQ(tc["do_lower_case"], false);  // as asked, though the vocabulary looks uncased
  EXPECT_EQ(tc["model_max_length"], 16);
  EXPECT_EQ(tc["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(tc["added_tokens_decoder"]["4"]["content"], "[MASK]");
  const auto tj = nlohmann::json::parse(read_file(d / "nested/model/tokenizer.json"));
  EXPECT_EQ(tj["model"]["vocab"]["##s"], 7);
  EXPECT_EQ(tj["normalizer"]["lowercase"], false);
  EXPECT_EQ(tj["post_processor"]["special_tokens"]["[SEP]"]["ids"][0], 3);
  const auto sm = nlohmann::json::parse(read_file(d / "nested/model/special_tokens_map.json"));
  EXPECT_EQ(sm["cls_token"], "[CLS]");
  const Vocab v = Vocab::load(d / "vocab.txt");
  EXPECT_FALSE(model_dir_lower_case(d / "nested/model", v));  // tokenizer_config.json wins
  EXPECT_TRUE(model_dir_lower_case(d / "nowhere", v));        // else guessed from the vocabulary
  write_raw(d / "nested/model/tokenizer_config.json", "{\"do_lower_case\": \"yes\"}");
  EXPECT_NE(error_of([&] { model_dir_lower_case(d / "nested/model", v); }).find("do_lower_case"), std::string::npos);
}

TEST(ModelDir, ElectraNamesAndConfigRoundTrip) {
  TmpDir d;
  BertConfig c = tiny_config();
  c.model_type = "electra";
  c.embedding_size = 8;  // narrower than hidden 12: embeddings_project
  Bert m(c, Heads::Discriminator);
  m.init_weights(4);
  save_model_dir(m, d / "disc");
  const std::string cfg = read_file(d / "disc/config.json");
  EXPECT_NE(cfg.find("\"model_type\": \"electra\""), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"embedding_size\": 8"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("ElectraForPreTraining"), std::string::npos) << cfg;
  EXPECT_EQ(architecture_heads(d / "disc"), Heads::Discriminator);
  SafetensorsFile f(d / "disc/model.safetensors");
  ASSERT_NE(f.find("electra.embeddings_project.weight"), nullptr);
  EXPECT_EQ(f.find("electra.embeddings_project.weight")->shape, (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(f.find("electra.embeddings.word_embeddings.weight")->shape, (std::vector<int64_t>{29, 8}));
  EXPECT_EQ(f.find("bert.embeddings.word_embeddings.weight"), nullptr);
  EXPECT_EQ(f.find("electra.pooler.dense.weight"), nullptr);  // ELECTRA has no pooler
  auto back = load_model_dir(d / "disc", Heads::Discriminator);
  EXPECT_EQ(back->params(), m.params());
  EXPECT_EQ(back->config().embedding_dim(), 8);
  // The encoder alone (ElectraModel) skips the discriminator head.
  auto enc = load_model_dir(d / "disc", Heads::None);
  EXPECT_EQ(enc->table().total() + 12 * 12 + 12 + 12 + 1, m.table().total());
  // An ELECTRA config refuses BERT's pre-training heads, a BERT config the ELECTRA heads.
  EXPECT_THROW(Bert(c, Heads::PreTraining), Error);
  EXPECT_THROW(Bert(tiny_config(), Heads::Discriminator), Error);
  BertConfig bad = c;
  bad.model_type = "roberta";
  EXPECT_THROW(bad.validate("x"), Error);
}

#include "bertcc/text_table.h"
// Classification columns by number or by name, the header rule, JSON lines (issue 43).
TEST(TextTable, ColumnsByNameOrNumberAndTheHeaderRule) {
  TmpDir d;
  write_raw(d / "hf.csv", "sentence,label\n\"a, b\",pos\nc d,neg\ne,pos\n");
  const auto rows = read_table(d / "hf.csv", ',');
  ASSERT_EQ(rows.size(), 4u);
  // By name: the first row is the header.
  TableColumns c = resolve_table_columns(rows, {}, "hf.csv", "label", {"sentence"}, false, {});
  EXPECT_TRUE(c.header);
  EXPECT_EQ(c.label, 1);
  EXPECT_EQ(c.text, std::vector<int>{0});
  EXPECT_EQ(describe_table_columns(rows, c), "the file's columns: sentence,label");
  // By number without --skip-header: detected ("label" is no label of the other rows, the cells are names).
  c = resolve_table_columns(rows, {}, "hf.csv", "1", {"0"}, false, {});
  EXPECT_TRUE(c.header);
  // ... unless the label cell is a known label.
  c = resolve_table_columns(rows, {}, "hf.csv", "1", {"0"}, false, {"label", "pos"});
  EXPECT_FALSE(c.header);
  // No header: a first row of data stays data (its label is another row's; its text is no name).
  write_raw(d / "plain.tsv", "1\tgreat film\n0\tawful\n1\tgood\n");
  const auto plain = read_table(d / "plain.tsv", '\t');
  c = resolve_table_columns(plain, {}, "plain.tsv", "0", {"1"}, false, {});
  EXPECT_FALSE(c.header);
  EXPECT_EQ(c.label, 0);
  EXPECT_EQ(describe_table_columns(plain, c), "the file's first row has 2 columns");
  // Hugging Face's names, for a file whose columns are not given: text/sentence, a sentence pair,
  // JSON keys; none for a file without a header.
  std::string label;
  std::vector<std::string> texts;
  EXPECT_TRUE(hf_named_columns(rows, {}, label, texts));
  EXPECT_EQ(label, "label");
  EXPECT_EQ(texts, std::vector<std::string>{"sentence"});
  write_raw(d / "pair.tsv", "idx\tsentence2\tsentence1\tlabel\n0\ta\tb\t1\n");
  EXPECT_TRUE(hf_named_columns(read_table(d / "pair.tsv", '\t'), {}, label, texts));
  EXPECT_EQ(texts, (std::vector<std::string>{"sentence1", "sentence2"}));
  EXPECT_TRUE(hf_named_columns({}, {"id", "text"}, label, texts));
  EXPECT_EQ(label, "");
  EXPECT_EQ(texts, std::vector<std::string>{"text"});
  label = "kept";
  EXPECT_FALSE(hf_named_columns(plain, {}, label, texts));
  EXPECT_EQ(label, "kept");
  EXPECT_TRUE(resolve_table_columns(plain, {}, "plain.tsv", "0", {"1"}, true, {}).header);  // --skip-header
  // A name missing from the header: the error lists the first row.
  const std::string e = error_of([&] { resolve_table_columns(rows, {}, "hf.csv", "labels", {"0"}, false, {}); });
  EXPECT_NE(e.find("hf.csv:1: --label-column 'labels' is not a column of the first row"), std::string::npos) << e;
  EXPECT_NE(e.find("the file's first row: sentence,label"), std::string::npos) << e;
}

TEST(TextTable, JsonLines) {
  TmpDir d;
  write_raw(d / "a.jsonl", "{\"text\": \"x y\", \"label\": 1, \"extra\": null}\n\n{\"label\": 0, \"text\": \"z\"}\n");
  std::vector<std::string> keys;
  const auto rows = read_json_lines(d / "a.jsonl", keys);
  EXPECT_EQ(keys, (std::vector<std::string>{"text", "label", "extra"}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].cols, (std::vector<std::string>{"x y", "1", ""}));
  EXPECT_EQ(rows[1].cols, (std::vector<std::string>{"z", "0", ""}));
  EXPECT_EQ(rows[1].line, 3);
  const TableColumns c = resolve_table_columns(rows, keys, "a.jsonl", "label", {"text"}, false, {});
  EXPECT_FALSE(c.header);
  EXPECT_EQ(c.label, 1);
  EXPECT_TRUE(is_json_lines("a.jsonl"));
  EXPECT_FALSE(is_json_lines("a.csv"));
  write_raw(d / "bad.jsonl", "{\"text\": \"x\"}\n[1, 2]\n");
  const std::string e = error_of([&] { read_json_lines(d / "bad.jsonl", keys); });
  EXPECT_NE(e.find("bad.jsonl:2: expected a JSON object"), std::string::npos) << e;
}

#include <fcntl.h>
#include <sys/stat.h>

// The bounded reader: only a regular file where one is expected, at most its kind's cap (from the
// size, before reading), and `-` for stdin with the cap counted as it is read.
TEST(FileIo, BoundedReaderRefusesWhatIsNotARegularFileOrTooBig) {
  TmpDir d;
  auto says = [](auto f, const std::string& want) {
    const std::string msg = error_of(f);
    if (msg.find(want) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << msg << "' lacks '" << want << "'";
  };
  EXPECT_TRUE(says([] { read_file("/dev/zero", kMaxConfigBytes, "config file"); },
                   "/dev/zero: is a character device, not a regular file (expected a config file)"));
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  // A FIFO with no writer: refused at once, not waited on.
  EXPECT_TRUE(says([&] { read_file(d / "fifo", kMaxVocabBytes, "vocabulary"); },
                   "fifo: is a FIFO (pipe), not a regular file (expected a vocabulary)"));
  EXPECT_TRUE(says([&] { read_file(d / "absent.json"); }, "absent.json: cannot open: No such file or directory"));

  write_raw(d / "hundred", std::string(100, 'x'));
  EXPECT_EQ(read_file(d / "hundred", 100, "config file").size(), 100u);  // the cap itself is allowed
  EXPECT_TRUE(says([&] { read_file(d / "hundred", 99, "config file"); },
                   "hundred: 100 bytes (9.31e-08 GiB), more than a config file can be"));
  // The caps per kind: a config is small, a vocabulary larger, data larger still.
  EXPECT_EQ(kMaxConfigBytes, uint64_t{64} << 20);
  EXPECT_LT(kMaxConfigBytes, kMaxVocabBytes);
  EXPECT_LT(kMaxVocabBytes, kMaxDataBytes);
  // load_config reads through it with the config cap: a 65 MiB config.json is refused unread.
  {
    std::ofstream big(d / "config.json", std::ios::binary);
    big.seekp(static_cast<std::streamoff>(kMaxConfigBytes));  // sparse: no 64 MiB written
    big.put('}');
  }
  EXPECT_TRUE(says([&] { load_config(d / "config.json"); }, "more than a config file can be"));
}

namespace {
// Runs f with stdin read from `path`; stdin is restored afterwards.
template <class F>
void with_stdin(const std::string& path, F f) {
  const int saved = ::dup(0);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::dup2(fd, 0);
  ::close(fd);
  struct Restore {
    int saved;
    ~Restore() {
      ::dup2(saved, 0);
      ::close(saved);
    }
  } restore{saved};
  f();
}
}  // namespace

TEST(FileIo, BoundedReaderTakesDashAsStdin) {
  TmpDir d;
  write_raw(d / "in.json", "{\"vocab_size\": 30}\n");
  with_stdin(d / "in.json", [] { EXPECT_EQ(read_file("-", 64, "config file"), "{\"vocab_size\": 30}\n"); });
  // Exactly the cap is read; one byte over is refused, counted as it is read (a pipe has no size).
  write_raw(d / "eight", "12345678");
  with_stdin(d / "eight", [] { EXPECT_EQ(read_file("-", 8, "config file"), "12345678"); });
  with_stdin(d / "eight", [] {
    const std::string e = error_of([] { read_file("-", 7, "config file"); });
    EXPECT_NE(e.find("<stdin>: more than 7 bytes"), std::string::npos) << e;
    EXPECT_NE(e.find("more than a config file can be"), std::string::npos) << e;
  });
  with_stdin("/dev/zero", [] {  // an endless stdin ends at the cap
    const std::string e = error_of([] { read_file("-", 1 << 20, "vocabulary"); });
    EXPECT_NE(e.find("<stdin>: more than 1048576 bytes"), std::string::npos) << e;
  });
  with_stdin(d.path.string(), [] {
    const std::string e = error_of([] { read_file("-"); });
    EXPECT_NE(e.find("<stdin>: is a folder"), std::string::npos) << e;
  });
}

// config.json's fields are range-checked as it is read, naming the file and the field, and the
// weights' memory is estimated from them before anything is allocated.
TEST(Config, FieldsOutOfRangeAreRefusedBeforeAllocation) {
  TmpDir d;
  const std::string base = R"("vocab_size": 30, "hidden_size": 12, "num_attention_heads": 3, "intermediate_size": 20)";
  auto refused = [&](const std::string& name, const std::string& fields, const std::string& want) {
    write_raw(d / name, "{" + fields + "}");
    const std::string e = error_of([&] { load_config(d / name); });
    if (e.find(d / name) != std::string::npos && e.find(want) != std::string::npos)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "'" << e << "' lacks the path or '" << want << "'";
  };
  const std::string ok = base + R"(, "num_hidden_layers": 1)";
  write_raw(d / "ok.json", "{" + ok + "}");
  EXPECT_EQ(load_config(d / "ok.json").num_hidden_layers, 1);
  EXPECT_TRUE(refused("layers.json", base + R"(, "num_hidden_layers": 1000000)",
                      "field 'num_hidden_layers' = 1000000 is outside the range 1 to 1024"));
  // 2^32 + 1 would wrap to 1 in an int: refused as read, wide.
  EXPECT_TRUE(refused("wrap.json", base + R"(, "num_hidden_layers": 4294967297)",
                      "field 'num_hidden_layers' = 4294967297 is out of range"));
  EXPECT_TRUE(refused("neg.json", ok + R"(, "type_vocab_size": -2)", "field 'type_vocab_size' must be positive"));
  EXPECT_TRUE(refused("pos.json", ok + R"(, "max_position_embeddings": 2000000)",
                      "field 'max_position_embeddings' = 2000000 is outside the range 1 to 1048576"));
  EXPECT_TRUE(refused("emb.json", ok + R"(, "embedding_size": 70000)", "field 'embedding_size' = 70000"));
  EXPECT_TRUE(refused("drop.json", ok + R"(, "hidden_dropout_prob": 1.5)", "field 'hidden_dropout_prob'"));
  EXPECT_TRUE(refused("eps.json", ok + R"(, "layer_norm_eps": 0)", "field 'layer_norm_eps'"));
  // 1e300 is a float's inf: an eps of inf makes every LayerNorm output its bias.
  EXPECT_TRUE(refused("epsinf.json", ok + R"(, "layer_norm_eps": 1e300)", "field 'layer_norm_eps'"));
  EXPECT_TRUE(refused("init.json", ok + R"(, "initializer_range": 1e300)", "field 'initializer_range'"));
  EXPECT_TRUE(refused("labels.json", ok + R"(, "num_labels": 1000000000)", "field 'num_labels'"));

  // Every field in range, the whole too large: refused from the estimate, before the table of
  // parameters is built (its message is the estimate's "about"), so nothing is allocated.
  BertConfig huge;
  huge.vocab_size = 1 << 24;
  huge.hidden_size = 65536;
  huge.num_attention_heads = 1024;
  huge.intermediate_size = 262144;
  huge.num_hidden_layers = 1024;
  const std::string e = error_of([&] { Bert m(huge, Heads::PreTraining); });
  EXPECT_NE(e.find("the weights of this model (about "), std::string::npos) << e;
  EXPECT_NE(e.find("check the config's sizes"), std::string::npos) << e;
}
