// The shared SVG pieces: user text in titles is escaped (the loss plot's title was written raw),
// and both pictures open and close the same way.
#include "formats/svg.h"

#include <gtest/gtest.h>

#include <string>

#include "model/loss_plot.h"

namespace tpf {
namespace {

TEST(Svg, EscapesEveryMarkupCharacter) {
  EXPECT_EQ(svg::escape(R"(a<b>&"c"'d')"), "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;");
  EXPECT_EQ(svg::escape("plain tp=2,pp=4"), "plain tp=2,pp=4");
}

TEST(Svg, TheLossPlotTitleIsEscaped) {
  const std::string picture = loss_svg({{0, 3.5}, {10, 2.0}}, "run <7> & 'x'");
  EXPECT_EQ(picture.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << picture;
  EXPECT_NE(picture.find(">run &lt;7&gt; &amp; &apos;x&apos;</text>"), std::string::npos)
      << picture;
  EXPECT_EQ(picture.find("<7>"), std::string::npos) << picture;
  EXPECT_EQ(picture.substr(picture.size() - 7), "</svg>\n");
}

}  // namespace
}  // namespace tpf
