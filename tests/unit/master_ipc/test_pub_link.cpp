// master/pub_link: the master <-> publish process stream (publish_processes).
#include <gtest/gtest.h>

#include <string>

#include "core/wire/msgpack.hpp"
#include "master/pub_link.hpp"

namespace sylvite::master {
namespace {

TEST(PubLink, MessagesSurviveAnySplit) {
  std::string frame("\x82\xa4head\x80\xa4" "body\xc4\x03" "abc", 18);
  std::string stream = pub_link::encode('A', frame) + pub_link::encode_to({"m1", "m2"}, frame) +
                       pub_link::encode_value('I', wire::value::array({7, "m1"})) + pub_link::encode('R', {});
  for (std::size_t step : {std::size_t{1}, std::size_t{3}, std::size_t{7}, stream.size()}) {
    pub_link::reader r;
    std::vector<pub_link::message> got;
    for (std::size_t i = 0; i < stream.size(); i += step) {
      r.feed(std::string_view(stream).substr(i, step));
      for (;;) {
        auto m = r.next();
        ASSERT_TRUE(m);
        if (!*m) break;
        got.push_back(std::move(**m));
      }
    }
    ASSERT_EQ(got.size(), 4u) << "step " << step;
    EXPECT_EQ(got[0].op, 'A');
    EXPECT_EQ(got[0].payload, frame);
    EXPECT_EQ(got[1].op, 'T');
    auto t = pub_link::decode_to(got[1].payload);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->ids, (std::vector<std::string>{"m1", "m2"}));
    EXPECT_EQ(t->frame, frame);
    EXPECT_EQ(got[2].op, 'I');
    auto v = wire::unpack(got[2].payload);
    ASSERT_TRUE(v);
    EXPECT_EQ((*v)[0].get<int>(), 7);
    EXPECT_EQ((*v)[1].get<std::string>(), "m1");
    EXPECT_EQ(got[3].op, 'R');
    EXPECT_TRUE(got[3].payload.empty());
  }
}

TEST(PubLink, BadLengthsPoisonTheStream) {
  {
    pub_link::reader r;
    r.feed(std::string("\0\0\0\0", 4));  // a message needs at least its op byte
    EXPECT_FALSE(r.next());
  }
  {
    pub_link::reader r(1024);
    r.feed(std::string("\0\0\x04\x01", 4) + "A");  // 1025 > the limit: refused before it arrives
    EXPECT_FALSE(r.next());
  }
  {
    pub_link::reader r(1024);
    r.feed(std::string("\0\0\x04\x00", 4) + "A");  // 1024 fits: waits for the rest
    auto m = r.next();
    ASSERT_TRUE(m);
    EXPECT_FALSE(*m);
  }
}

TEST(PubLink, MalformedTargetedPayloadsAreRefused) {
  EXPECT_FALSE(pub_link::decode_to(""));
  EXPECT_FALSE(pub_link::decode_to("\x91"));               // an array cut short
  EXPECT_FALSE(pub_link::decode_to(std::string("\xa2m1")));  // not an array
  EXPECT_FALSE(pub_link::decode_to(std::string("\x91\x01")));  // an id that is not text
  auto ok = pub_link::decode_to(std::string("\x90") + "frame");
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->ids.empty());
  EXPECT_EQ(ok->frame, "frame");
}

}  // namespace
}  // namespace sylvite::master
