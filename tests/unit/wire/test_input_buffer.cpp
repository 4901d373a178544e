// Unit tests for wire::input_buffer (core/wire/input_buffer.hpp), the receive buffer of
// frame_parser and of the ZMTP codec: pending bytes survive compaction, capacity_after()
// predicts the capacity exactly, memory is freed between messages.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/wire/input_buffer.hpp"

using sylvite::wire::input_buffer;

TEST(InputBuffer, PendingBytesSurviveCompactionAndCapacityIsPredicted) {
  std::mt19937 rng(7);
  input_buffer b;
  std::string model;  // what pending() must hold
  char next = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 700)(rng);
    std::string chunk(n, '\0');
    for (auto& c : chunk) c = next++;
    const std::size_t predicted = b.capacity_after(n);
    b.append(chunk);
    ASSERT_EQ(b.capacity(), predicted) << "step " << i;
    model += chunk;
    const std::size_t eat = std::uniform_int_distribution<std::size_t>(0, model.size())(rng);
    b.consume(eat);
    model.erase(0, eat);
    ASSERT_EQ(b.size(), model.size());
    ASSERT_EQ(b.pending(), model) << "step " << i;
  }
}

TEST(InputBuffer, GrowsByDoublingAndCompactsBeforeGrowing) {
  input_buffer b;
  b.append(std::string(100, 'a'));
  const std::size_t cap = b.capacity();
  EXPECT_GE(cap, 100u);
  EXPECT_EQ(b.capacity_after(cap + 1), std::max<std::size_t>(100 + cap + 1, 2 * cap));
  // Once at least half is consumed, an append moves the rest down instead of growing.
  b.consume(60);
  EXPECT_EQ(b.capacity_after(cap - 40), cap);
  b.append(std::string(cap - 40, 'b'));
  EXPECT_EQ(b.capacity(), cap);
  EXPECT_EQ(b.pending(), std::string(40, 'a') + std::string(cap - 40, 'b'));
}

TEST(InputBuffer, ReleaseFreesOnlyWhenNothingIsPending) {
  input_buffer b;
  b.append(std::string(4096, 'x'));
  b.consume(4000);
  b.release();
  EXPECT_GE(b.capacity(), 4096u);  // 96 bytes still pending: kept
  EXPECT_EQ(b.size(), 96u);
  b.consume(96);
  b.release();
  EXPECT_EQ(b.size(), 0u);
  EXPECT_LT(b.capacity(), 64u);  // back to the empty string's inline buffer
  // A large buffer emptied by compaction is freed too (over keep_capacity).
  b.append(std::string(input_buffer::keep_capacity * 2, 'y'));
  b.consume(b.size());
  b.append("z");
  EXPECT_LT(b.capacity(), input_buffer::keep_capacity);
  EXPECT_EQ(b.pending(), "z");
  b.clear();
  EXPECT_EQ(b.size(), 0u);
}
