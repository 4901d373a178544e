// sylvite::util result type and the util error category.
// Owns: result<T> (boost::system::result, header-only, no Asio) and util::errc.
// Thread-safety: plain values.
#pragma once
#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>
#include <string>
#include <system_error>

namespace sylvite {

// Every synchronous library function that can fail returns result<T>.
// Errors are boost::system::error_code; each layer has its own errc enum + category.
template <class T>
using result = boost::system::result<T>;
using error_code = boost::system::error_code;

}  // namespace sylvite

namespace sylvite::util {

enum class errc {
  ok = 0,
  io_error,        // read/write failed (the file functions return the errno itself, system category)
  not_found,       // file or entry missing
  already_exists,  // O_EXCL create lost the race
  invalid_argument,
};

const boost::system::error_category& util_category() noexcept;
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), util_category()}; }

}  // namespace sylvite::util

template <>
struct boost::system::is_error_code_enum<sylvite::util::errc> : std::true_type {};
