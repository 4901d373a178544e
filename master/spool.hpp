// sylvite::master spool: a local write-ahead log of job writes. A record is appended
// before the call that made it returns, so before the minion's ack; a consumer thread
// applies the records later and releases them.
// Users: the PostgreSQL job cache (job_store_pg.hpp: every load, minion list and return;
// the consumer copies them to the database and keeps its checkpoint there, keyed by the
// spool's id, so each record is stored exactly once and in order), and the file job
// cache's journal mode (job_cache.hpp: returns; the consumer writes them into Salt's
// layout; replaying a record twice is harmless, the first return.p wins).
// Layout: <dir>/spool.id (32 hex characters, made once) and segments
// <dir>/<first seq, 20 digits>.spool, append-only; a segment is closed past
// segment_bytes and removed once every record in it is committed. The newest segment is
// never removed (its name keeps the sequence going when it is empty).
// Record: 24-byte header {magic u32 "SYSP", payload length u32, seq u64, crc32 u32 of
// (seq, kind, payload), kind u8, 3 zero bytes} then the payload, little endian.
// Durability, as the file job cache (job_cache.hpp): one write(2) per record, complete in
// the page cache before append returns (survives a master SIGKILL), made durable by the
// filesystem's group commit (util::group_syncer, a few ms later); flush() waits for it.
// At open, a torn record at the end of the newest segment (a crash mid-write that was
// never acknowledged) is cut off; a bad record elsewhere ends that segment (logged).
// Thread-safety: every method from any thread (one mutex); append may block on disk.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/files.hpp"
#include "core/util/result.hpp"

namespace sylvite::master {

struct spool_record {
  std::uint64_t seq = 0;
  char kind = 0;  // 'L' load, 'M' minions, 'R' return
  std::string payload;
};

inline constexpr std::size_t spool_header_size = 24;
std::uint32_t crc32(std::string_view data, std::uint32_t crc = 0);
std::string encode_record(const spool_record& r);
enum class decode_status { ok, incomplete, corrupt };
// One record from the front of buf; used = its size when ok.
decode_status decode_record(std::string_view buf, spool_record& out, std::size_t& used);

// Little-endian u32 fields of record payloads: append one; read one at off (advanced),
// false when fewer than 4 bytes are left.
void put_u32(std::string& s, std::uint32_t v);
bool read_u32(std::string_view s, std::size_t& off, std::uint32_t& v);

// Payload of an 'L' or 'M' record: u32 length of the jid, the jid, then JSON text.
std::string keyed_payload(std::string_view jid, std::string_view json);
bool split_keyed_payload(std::string_view payload, std::string_view& jid, std::string_view& json);

class spool {
 public:
  struct stats {
    std::uint64_t appended = 0;
    std::uint64_t segments = 0;
    std::uint64_t bytes = 0;
    std::uint64_t cut_bytes = 0;  // torn tail cut at open
  };
  // Opens (or makes, 0700) dir. max_bytes bounds the spool: append refuses past it.
  // label names the spool in log lines ("pgjsonb spool", "job cache journal").
  static result<std::unique_ptr<spool>> open(const std::filesystem::path& dir, std::uint64_t max_bytes,
                                             std::uint64_t segment_bytes = 64ull << 20,
                                             std::string label = "pgjsonb spool");
  ~spool();
  spool(const spool&) = delete;
  spool& operator=(const spool&) = delete;

  const std::string& id() const noexcept { return id_; }
  // Appends one record; its sequence number.
  result<std::uint64_t> append(char kind, std::string_view payload);
  std::uint64_t last_seq() const;
  // The records after seq `after`, in order: at most max_records and about max_bytes.
  std::vector<spool_record> read_after(std::uint64_t after, std::size_t max_records, std::size_t max_bytes);
  // Every record up to seq is committed: removes the segments holding only such records.
  void release(std::uint64_t upto);
  void flush();  // everything appended so far is on disk
  stats get_stats() const;

 private:
  struct segment {
    std::uint64_t first = 0;  // seq of its first record (or of the next one, when empty)
    std::filesystem::path path;
    std::uint64_t size = 0;   // bytes of whole records
  };
  spool() = default;
  result<void> roll_locked();

  std::filesystem::path dir_;
  std::string label_;
  std::string id_;
  std::uint64_t max_bytes_ = 0;
  std::uint64_t segment_bytes_ = 0;
  std::shared_ptr<util::group_syncer> syncer_;
  mutable std::mutex mu_;
  std::vector<segment> segs_;  // oldest first; back() is the active one
  int fd_ = -1;                // the active segment, O_APPEND
  std::uint64_t last_seq_ = 0;
  std::uint64_t total_bytes_ = 0;
  stats stats_;
  // Reader cursor (the writer thread reads sequentially).
  std::uint64_t cur_seq_ = UINT64_MAX;  // last seq returned by read_after
  std::uint64_t cur_first_ = 0;         // segment of the cursor
  std::uint64_t cur_off_ = 0;           // offset after that record
};

}  // namespace sylvite::master
