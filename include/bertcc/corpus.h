// Corpus preparation: English sentence segmentation and sharding into Google's input format
// (one sentence per line, a blank line between documents).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bertcc {

// Rule-based English sentence segmentation in the spirit of NLTK's Punkt (which NVIDIA used):
// boundaries after . ? ! (and … ...) with optional closing quotes/brackets, when the next word
// starts with an uppercase letter, a digit or an opening quote/bracket. No boundary after known
// titles (Mr. Dr. St. ...), single-letter initials (J. R. R.), dotted acronyms (U.S. e.g.) or a
// decimal point. Unlike Punkt it learns no abbreviations from the corpus.
std::vector<std::string> split_sentences(std::string_view paragraph);

// A plain-text document: paragraphs separated by blank lines; lines inside a paragraph are
// joined (hard-wrapped text), then segmented. Returns sentences in order.
std::vector<std::string> segment_document(std::string_view text);

// Replaces invalid UTF-8 sequences by U+FFFD in place; returns how many were replaced.
int64_t sanitize_utf8(std::string& s);

}  // namespace bertcc
