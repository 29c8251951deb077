// Wikipedia dumps: stream a MediaWiki XML export (.xml or .xml.bz2, single- or multi-stream)
// page by page, keep main-namespace non-redirect articles, and turn their wikitext into plain
// paragraphs (templates, tables, references, headings, lists, files/categories, markup removed).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace bertcc {

struct WikiStats {
  int64_t pages = 0, articles = 0, redirects = 0, other_namespaces = 0;
};

// Calls on_article(title, wikitext) for every article; memory is bounded by the largest page.
// Errors (unreadable, not bzip2, corrupt or truncated compressed data, malformed XML) name the file.
// on_progress(bytes of the file consumed, file size), called about once per MB of input.
void read_wikipedia_dump(const std::string& path,
                         const std::function<void(const std::string& title, const std::string& wikitext)>& on_article,
                         WikiStats* stats = nullptr,
                         const std::function<void(uint64_t done, uint64_t total)>& on_progress = nullptr);

// Plain text: paragraphs separated by blank lines.
std::string wikitext_to_plain(std::string_view wikitext);

// XML/HTML character references (&lt; &amp; &#8212; &#x2014; &nbsp; ...) decoded to UTF-8.
std::string decode_entities(std::string_view s);

}  // namespace bertcc
