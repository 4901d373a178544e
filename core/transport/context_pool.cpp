#include "core/transport/context_pool.hpp"

namespace sylvite::transport {

context_pool::context_pool(std::size_t n) {
  auto list = std::make_shared<std::vector<boost::asio::io_context*>>();
  for (std::size_t i = 0; i < n; ++i) {
    ios_.push_back(std::make_unique<boost::asio::io_context>(1));
    guards_.emplace_back(ios_.back()->get_executor());
    list->push_back(ios_.back().get());
  }
  list_ = std::move(list);
}

context_pool::~context_pool() {
  stop();
  join();
}

void context_pool::start() {
  for (auto& c : ios_) threads_.emplace_back([c = c.get()] { c->run(); });
}

void context_pool::release() { guards_.clear(); }

void context_pool::stop() {
  for (auto& c : ios_) c->stop();
}

void context_pool::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace sylvite::transport
