// Helpers shared by the transport unit tests (test_transport.cpp, test_transport_zmq.cpp):
// an io_context on two threads, a waitable counter, bounded waits, and a blocking raw TCP
// connection for misbehaving peers. Header-only, in an anonymous namespace of each test.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/transport.hpp"

namespace sylvite::transport::testing {

inline constexpr std::chrono::seconds kWait{30};  // generous bound for anything that should happen "soon"

// An io_context run by two threads (the daemons' model). Declare it after what its
// handlers touch: its threads are joined first.
struct io_pool {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::vector<std::thread> threads;
  explicit io_pool(int n = 2) {
    for (int i = 0; i < n; ++i) threads.emplace_back([this] { io.run(); });
  }
  void stop_and_join() {
    guard.reset();
    io.stop();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
  ~io_pool() { stop_and_join(); }
};

// Counter with a condition variable: wait until it reaches a value.
struct counter {
  std::mutex mu;
  std::condition_variable cv;
  int n = 0;
  void add(int k = 1) {
    {
      std::lock_guard lk(mu);
      n += k;
    }
    cv.notify_all();
  }
  bool wait_for(int target, std::chrono::seconds d = kWait) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, d, [&] { return n >= target; });
  }
  int get() {
    std::lock_guard lk(mu);
    return n;
  }
};

// Wait for a condition that has no event of its own (e.g. a connection count), bounded by d.
template <class Pred>
bool eventually(Pred p, std::chrono::milliseconds d = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + d;
  while (!p()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

template <class T>
T get(std::future<T>& f) {
  if (f.wait_for(kWait) != std::future_status::ready) {
    ADD_FAILURE() << "future not ready in time";
    std::abort();  // a hung transport would otherwise hang the whole suite
  }
  return f.get();
}

inline endpoint local_tcp(std::uint16_t port = 0) { return endpoint{"127.0.0.1", port, {}}; }

// Blocking raw TCP connection to 127.0.0.1:port for misbehaving peers; fd < 0 when the
// connect failed. Reads time out after kWait.
struct raw_conn {
  int fd = -1;
  explicit raw_conn(std::uint16_t port, int rcvbuf = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{static_cast<time_t>(kWait.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  raw_conn(const raw_conn&) = delete;
  raw_conn& operator=(const raw_conn&) = delete;
  ~raw_conn() {
    if (fd >= 0) ::close(fd);
  }
  bool write_all(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Read until EOF/error; true if the peer closed (EOF or reset), false on timeout.
  bool wait_closed() {
    char buf[4096];
    for (;;) {
      auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
};

}  // namespace sylvite::transport::testing
