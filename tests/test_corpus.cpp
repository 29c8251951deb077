#include <gtest/gtest.h>

#include "bertcc/corpus.h"

using bertcc::segment_document;
using bertcc::split_sentences;
using V = std::vector<std::string>;

TEST(Sentences, AbbreviationsInitialsDecimalsQuotesEllipses) {
  EXPECT_EQ(split_sentences("Mr. Smith went to Washington. He arrived at 3.30 p.m. on Friday."),
            (V{"Mr. Smith went to Washington.", "He arrived at 3.30 p.m. on Friday."}));
  EXPECT_EQ(split_sentences("J. R. R. Tolkien wrote books. The U.S. Army agreed."),
            (V{"J. R. R. Tolkien wrote books.", "The U.S. Army agreed."}));
  EXPECT_EQ(split_sentences("\"Stop!\" he cried. \"Why?\" She asked again."),
            (V{"\"Stop!\" he cried.", "\"Why?\"", "She asked again."}));  // as Punkt: '?' + capital
  EXPECT_EQ(split_sentences("Wait... what happened? Nothing... Then it rained!"),
            (V{"Wait... what happened?", "Nothing...", "Then it rained!"}));
  EXPECT_EQ(split_sentences("It cost $4.50 in 1999. (Prices rose.) Later, 2000 came."),
            (V{"It cost $4.50 in 1999.", "(Prices rose.)", "Later, 2000 came."}));
  EXPECT_EQ(split_sentences("Call me Ishmael. Some years ago\xE2\x80\x94never mind how long."),
            (V{"Call me Ishmael.", "Some years ago\xE2\x80\x94never mind how long."}));
  EXPECT_EQ(split_sentences("He said \xE2\x80\x9Cyes.\xE2\x80\x9D Then left."),
            (V{"He said \xE2\x80\x9Cyes.\xE2\x80\x9D", "Then left."}));
}

TEST(Sentences, DocumentsJoinWrappedLinesAndSplitParagraphs) {
  EXPECT_EQ(segment_document("First line of a\nwrapped sentence. Second one.\n\n  \nNew paragraph here.\n"),
            (V{"First line of a wrapped sentence.", "Second one.", "New paragraph here."}));
  EXPECT_TRUE(segment_document("\n\n   \n").empty());
}
