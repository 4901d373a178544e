// sylvite::master spool (spool.hpp): append-only segments of checksummed records, read
// back in order by the consumer thread, removed once applied.
#include "master/spool.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace sylvite::master {
namespace fs = std::filesystem;

namespace {
constexpr std::uint32_t k_magic = 0x50535953;  // "SYSP" little endian

void put32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
std::uint32_t get32(std::string_view s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}
std::uint64_t get64(std::string_view s, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

std::uint32_t record_crc(std::uint64_t seq, char kind, std::string_view payload) {
  std::string head;
  put64(head, seq);
  head.push_back(kind);
  return crc32(payload, crc32(head));
}

std::string seg_name(std::uint64_t first) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu.spool", static_cast<unsigned long long>(first));
  return buf;
}

// Reads [off, off+len) of a file (short at its end).
bool read_at(const fs::path& p, std::uint64_t off, std::size_t len, std::string& out) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  out.resize(len);
  std::size_t got = 0;
  while (got < len) {
    ssize_t n = ::pread(fd, out.data() + got, len - got, static_cast<off_t>(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return true;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string random_hex32() {
  std::array<unsigned char, 16> b{};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = false;
  if (fd >= 0) {
    ok = ::read(fd, b.data(), b.size()) == static_cast<ssize_t>(b.size());
    ::close(fd);
  }
  if (!ok) {  // never expected; still unique enough per master and time
    auto t = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(t >> (8 * i));
    auto p = static_cast<std::uint64_t>(::getpid());
    for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(8 + i)] = static_cast<unsigned char>(p >> (8 * i));
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (auto c : b) {
    s.push_back(hex[c >> 4]);
    s.push_back(hex[c & 15]);
  }
  return s;
}
}  // namespace

std::uint32_t crc32(std::string_view data, std::uint32_t crc) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (char ch : data) crc = table[(crc ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string encode_record(const spool_record& r) {
  std::string s;
  s.reserve(spool_header_size + r.payload.size());
  put32(s, k_magic);
  put32(s, static_cast<std::uint32_t>(r.payload.size()));
  put64(s, r.seq);
  put32(s, record_crc(r.seq, r.kind, r.payload));
  s.push_back(r.kind);
  s.append(3, '\0');
  s += r.payload;
  return s;
}

decode_status decode_record(std::string_view buf, spool_record& out, std::size_t& used) {
  if (buf.size() < spool_header_size) {
    // A header cut short, unless what is there is already wrong.
    if (buf.size() >= 4 && get32(buf, 0) != k_magic) return decode_status::corrupt;
    return decode_status::incomplete;
  }
  if (get32(buf, 0) != k_magic) return decode_status::corrupt;
  const std::uint32_t len = get32(buf, 4);
  if (len > (256u << 20)) return decode_status::corrupt;
  if (buf.size() < spool_header_size + len) return decode_status::incomplete;
  spool_record r;
  r.seq = get64(buf, 8);
  const std::uint32_t crc = get32(buf, 16);
  r.kind = buf[20];
  r.payload.assign(buf.substr(spool_header_size, len));
  if (record_crc(r.seq, r.kind, r.payload) != crc) return decode_status::corrupt;
  out = std::move(r);
  used = spool_header_size + len;
  return decode_status::ok;
}

void put_u32(std::string& s, std::uint32_t v) { put32(s, v); }

bool read_u32(std::string_view s, std::size_t& off, std::uint32_t& v) {
  if (off > s.size() || s.size() - off < 4) return false;
  v = get32(s, off);
  off += 4;
  return true;
}

std::string keyed_payload(std::string_view jid, std::string_view json) {
  std::string s;
  put32(s, static_cast<std::uint32_t>(jid.size()));
  s += jid;
  s += json;
  return s;
}

bool split_keyed_payload(std::string_view payload, std::string_view& jid, std::string_view& json) {
  if (payload.size() < 4) return false;
  const std::uint32_t n = get32(payload, 0);
  if (payload.size() < 4 + static_cast<std::size_t>(n)) return false;
  jid = payload.substr(4, n);
  json = payload.substr(4 + n);
  return true;
}

result<std::unique_ptr<spool>> spool::open(const fs::path& dir, std::uint64_t max_bytes,
                                           std::uint64_t segment_bytes, std::string label) {
  std::unique_ptr<spool> s(new spool());
  s->dir_ = dir;
  s->label_ = std::move(label);
  s->max_bytes_ = max_bytes;
  s->segment_bytes_ = std::max<std::uint64_t>(segment_bytes, 4096);
  if (auto r = util::make_dirs(dir, 0700); !r) {
    spdlog::error("{}: cannot create {}: {}", s->label_, dir.string(), r.error().message());
    return r.error();
  }
  // The spool's identity (the database's checkpoint is kept per identity).
  const fs::path idp = dir / "spool.id";
  if (auto id = util::read_file_nofollow(idp, 256); id && id->size() >= 32) {
    s->id_ = id->substr(0, 32);
  } else {
    s->id_ = random_hex32();
    if (auto w = util::write_file_atomic(idp, s->id_ + "\n", 0600); !w) {
      spdlog::error("{}: cannot write {}: {}", s->label_, idp.string(), w.error().message());
      return w.error();
    }
  }
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 26 || !name.ends_with(".spool")) continue;
    std::uint64_t first = 0;
    bool digits = true;
    for (int i = 0; i < 20; ++i) {
      if (name[static_cast<std::size_t>(i)] < '0' || name[static_cast<std::size_t>(i)] > '9') digits = false;
      else first = first * 10 + static_cast<std::uint64_t>(name[static_cast<std::size_t>(i)] - '0');
    }
    if (!digits) continue;
    s->segs_.push_back({first, it->path(), 0});
  }
  std::sort(s->segs_.begin(), s->segs_.end(), [](const segment& a, const segment& b) { return a.first < b.first; });
  // Scan every segment: whole records only, sequence numbers increasing.
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < s->segs_.size(); ++i) {
    auto& sg = s->segs_[i];
    const bool newest = i + 1 == s->segs_.size();
    std::string data;
    struct stat st {};
    if (::stat(sg.path.c_str(), &st) != 0 || !read_at(sg.path, 0, static_cast<std::size_t>(st.st_size), data)) {
      spdlog::error("{}: cannot read {}: {}", s->label_, sg.path.string(), std::strerror(errno));
      return util::errc::io_error;
    }
    std::size_t off = 0;
    std::uint64_t seg_last = sg.first ? sg.first - 1 : 0;
    while (off < data.size()) {
      spool_record r;
      std::size_t used = 0;
      auto st2 = decode_record(std::string_view(data).substr(off), r, used);
      if (st2 != decode_status::ok || r.seq <= seg_last) {
        const auto cut = data.size() - off;
        if (newest && st2 == decode_status::incomplete) {
          spdlog::warn("{}: {}: cutting a torn record at its end ({} bytes, never acknowledged)", s->label_,
                       sg.path.string(), cut);
        } else {
          spdlog::error("{}: {}: bad record at offset {}: the {} bytes after it are dropped", s->label_,
                        sg.path.string(), off, cut);
        }
        if (::truncate(sg.path.c_str(), static_cast<off_t>(off)) != 0)
          spdlog::error("{}: cannot truncate {}: {}", s->label_, sg.path.string(), std::strerror(errno));
        s->stats_.cut_bytes += cut;
        break;
      }
      seg_last = r.seq;
      off += used;
    }
    sg.size = off;
    s->total_bytes_ += off;
    last = std::max(last, seg_last);
  }
  s->last_seq_ = last;
  if (s->segs_.empty()) {
    s->segs_.push_back({1, dir / seg_name(1), 0});
  }
  s->fd_ = ::open(s->segs_.back().path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (s->fd_ < 0) {
    spdlog::error("{}: cannot open {}: {}", s->label_, s->segs_.back().path.string(), std::strerror(errno));
    return util::errc::io_error;
  }
  // No sync here: a start must not wait on a busy filesystem's syncfs; a cut tail that
  // is not yet durable is cut again at the next open.
  s->syncer_ = util::group_syncer::shared_for(dir);
  return s;
}

spool::~spool() {
  if (syncer_) syncer_->flush();
  if (fd_ >= 0) ::close(fd_);
}

result<void> spool::roll_locked() {
  const std::uint64_t first = last_seq_ + 1;
  const fs::path p = dir_ / seg_name(first);
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    spdlog::error("{}: cannot create {}: {}", label_, p.string(), std::strerror(errno));
    return util::errc::io_error;
  }
  ::close(fd_);
  fd_ = fd;
  segs_.push_back({first, p, 0});
  stats_.segments++;
  return {};
}

result<std::uint64_t> spool::append(char kind, std::string_view payload) {
  std::lock_guard lk(mu_);
  if (total_bytes_ + payload.size() + spool_header_size > max_bytes_) {
    return util::errc::io_error;  // the caller logs (the spool is full: the database is away too long)
  }
  if (segs_.back().size >= segment_bytes_) {
    if (auto r = roll_locked(); !r) return r.error();
  }
  spool_record r;
  r.seq = last_seq_ + 1;
  r.kind = kind;
  r.payload.assign(payload);
  const std::string bytes = encode_record(r);
  if (!write_all(fd_, bytes)) {
    const int e = errno;
    spdlog::error("{}: cannot append to {}: {}", label_, segs_.back().path.string(), std::strerror(e));
    // A partial write is cut (the next open would cut it anyway).
    if (::ftruncate(fd_, static_cast<off_t>(segs_.back().size)) != 0) {
    }
    return util::errc::io_error;
  }
  last_seq_ = r.seq;
  segs_.back().size += bytes.size();
  total_bytes_ += bytes.size();
  stats_.appended++;
  syncer_->note();
  return r.seq;
}

std::uint64_t spool::last_seq() const {
  std::lock_guard lk(mu_);
  return last_seq_;
}

std::vector<spool_record> spool::read_after(std::uint64_t after, std::size_t max_records, std::size_t max_bytes) {
  std::vector<spool_record> out;
  std::unique_lock lk(mu_);
  if (after >= last_seq_) return out;
  // Where to start: the cursor if it is at `after`, else the segment holding after + 1.
  std::size_t si = 0;
  std::uint64_t off = 0;
  bool from_cursor = false;
  if (cur_seq_ == after) {
    for (std::size_t i = 0; i < segs_.size(); ++i)
      if (segs_[i].first == cur_first_) {
        si = i;
        off = cur_off_;
        from_cursor = true;
      }
  }
  if (!from_cursor) {
    si = 0;
    for (std::size_t i = 0; i < segs_.size(); ++i)
      if (segs_[i].first <= after + 1) si = i;
    off = 0;
  }
  // Segment bounds are copied: reading happens outside the lock.
  std::vector<segment> segs(segs_.begin() + static_cast<std::ptrdiff_t>(si), segs_.end());
  lk.unlock();
  std::size_t bytes = 0;
  std::uint64_t last_first = 0, last_off = 0, last_seq = after;
  for (std::size_t i = 0; i < segs.size() && out.size() < max_records && bytes < max_bytes; ++i) {
    const auto& sg = segs[i];
    std::uint64_t pos = i == 0 ? off : 0;
    while (pos < sg.size && out.size() < max_records && bytes < max_bytes) {
      std::string chunk;
      const std::size_t want =
          static_cast<std::size_t>(std::min<std::uint64_t>(sg.size - pos, std::max<std::size_t>(max_bytes - bytes, 1 << 16)));
      if (!read_at(sg.path, pos, std::min<std::size_t>(want, 8u << 20), chunk) || chunk.empty()) break;
      std::size_t c = 0;
      bool progressed = false;
      while (c < chunk.size() && out.size() < max_records && bytes < max_bytes) {
        spool_record r;
        std::size_t used = 0;
        auto st = decode_record(std::string_view(chunk).substr(c), r, used);
        if (st == decode_status::incomplete) {
          if (c == 0) {  // one record larger than the chunk: read it whole
            std::size_t need = spool_header_size;
            if (chunk.size() >= 8) need += get32(chunk, 4);
            if (!read_at(sg.path, pos, need, chunk) || chunk.size() < need) {
              pos = sg.size;
              break;
            }
            continue;
          }
          break;
        }
        if (st == decode_status::corrupt) {
          spdlog::error("{}: {}: bad record at offset {}: the rest of the segment is skipped", label_,
                        sg.path.string(), pos + c);
          pos = sg.size;
          break;
        }
        c += used;
        progressed = true;
        last_first = sg.first;
        last_off = pos + c;
        if (r.seq <= after) continue;
        last_seq = r.seq;
        bytes += r.payload.size();
        out.push_back(std::move(r));
      }
      if (!progressed) break;
      pos += c;
    }
  }
  lk.lock();
  if (!out.empty()) {
    cur_seq_ = last_seq;
    cur_first_ = last_first;
    cur_off_ = last_off;
  }
  return out;
}

void spool::release(std::uint64_t upto) {
  std::lock_guard lk(mu_);
  // Everything is committed: a big (or bound-filling) newest segment is closed, so that it
  // can go too (its successor, empty, keeps the sequence).
  if (upto >= last_seq_ && segs_.back().size > 0 &&
      (segs_.back().size >= segment_bytes_ / 4 || total_bytes_ + (64u << 10) > max_bytes_)) {
    (void)roll_locked();
  }
  while (segs_.size() > 1 && segs_[1].first - 1 <= upto) {
    std::error_code ec;
    fs::remove(segs_.front().path, ec);
    if (ec) {
      spdlog::error("{}: cannot remove {}: {}", label_, segs_.front().path.string(), ec.message());
      return;
    }
    total_bytes_ -= std::min(total_bytes_, segs_.front().size);
    segs_.erase(segs_.begin());
  }
}

void spool::flush() {
  if (syncer_) syncer_->flush();
}

spool::stats spool::get_stats() const {
  std::lock_guard lk(mu_);
  stats s = stats_;
  s.segments = segs_.size();
  s.bytes = total_bytes_;
  return s;
}

}  // namespace sylvite::master
