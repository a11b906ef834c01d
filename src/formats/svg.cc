#include "formats/svg.h"

#include <cstdio>

namespace tpf::svg {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string begin(double width, double height, int font_size) {
  char head[256];
  std::snprintf(head, sizeof head,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"%d\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height, font_size);
  return head;
}

std::string title(double x, double y, std::string_view anchor, std::string_view text) {
  char head[128];
  std::snprintf(head, sizeof head,
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"%.*s\" font-size=\"15\">", x, y,
                static_cast<int>(anchor.size()), anchor.data());
  return head + escape(text) + "</text>\n";
}

}  // namespace tpf::svg
