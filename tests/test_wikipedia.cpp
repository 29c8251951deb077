#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/wikipedia.h"

using namespace bertcc;

namespace {
std::string sample() { return std::string(BERTCC_SOURCE_DIR) + "/tests/data/wiki_sample.xml"; }
}  // namespace

TEST(Wikipedia, ReadsArticlesSkipsRedirectsAndOtherNamespaces) {
  std::vector<std::string> titles, texts;
  WikiStats st;
  read_wikipedia_dump(
      sample(),
      [&](const std::string& t, const std::string& w) {
        titles.push_back(t);
        texts.push_back(w);
      },
      &st);
  EXPECT_EQ(titles, (std::vector<std::string>{"Anarchism", "Empty"}));
  EXPECT_EQ(st.pages, 4);
  EXPECT_EQ(st.redirects, 1);
  EXPECT_EQ(st.other_namespaces, 1);
  const std::string plain = wikitext_to_plain(texts[0]);
  EXPECT_EQ(plain,
            "Anarchism is a political philosophy and movement that is skeptical of all justifications for authority. "
            "It calls for the abolition of the state.\n"
            "\n"
            "The word comes from Ancient Greek anarchia \xE2\x80\x93 meaning \"without a ruler\" (ca. 1642). "
            "Mr. Proudhon used it in 1840.\n"
            "\n"
            "See the site and. It ends here.\n");
  EXPECT_EQ(wikitext_to_plain(texts[1]), "");
}

TEST(Wikipedia, EntitiesAndErrors) {
  EXPECT_EQ(decode_entities("a &lt;b&gt; &amp;amp; &#8212; &#x41; &bogus; &"), "a <b> &amp; \xE2\x80\x94 A &bogus; &");
  const auto dir = std::filesystem::temp_directory_path();
  const std::string notxml = (dir / "bertcc_notwiki.xml").string();
  {
    FILE* f = std::fopen(notxml.c_str(), "w");
    std::fputs(std::string(5000, 'x').c_str(), f);
    std::fclose(f);
  }
  EXPECT_THROW(read_wikipedia_dump(notxml, [](const std::string&, const std::string&) {}), Error);
  const std::string badbz = (dir / "bertcc_bad.xml.bz2").string();
  {
    FILE* f = std::fopen(badbz.c_str(), "w");
    std::fputs("this is not bzip2 data at all", f);
    std::fclose(f);
  }
  try {
    read_wikipedia_dump(badbz, [](const std::string&, const std::string&) {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bertcc_bad.xml.bz2: not a bzip2 file"), std::string::npos) << e.what();
  }
  std::filesystem::remove(notxml);
  std::filesystem::remove(badbz);
}
