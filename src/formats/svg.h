// The pieces every SVG picture the tools draw shares (the loss curve of `tpf train`, the layout
// ranking of `tpf plan --svg`): the document's opening with a white page, and titles and labels
// escaped, since model names and layouts are user text.
#pragma once

#include <string>
#include <string_view>

namespace tpf::svg {

// Text made safe inside an SVG element or a double-quoted attribute.
std::string escape(std::string_view text);

// "<svg ...>" of `width` x `height` with the font used for labels, and a white background.
std::string begin(double width, double height, int font_size);

// A title line centred on `x` (anchor "middle") or starting at it ("start"), escaped.
std::string title(double x, double y, std::string_view anchor, std::string_view text);

inline constexpr const char* kEnd = "</svg>\n";

}  // namespace tpf::svg
