// engine/io/reader_test.cc: tests of the record readers. Every mode x backend
// combination reads files of a few MB written under $TEST_TMPDIR with a
// per-4K-page pattern and checks bytes, tags, error reporting under injected
// faults, the bandwidth cap, latency windows, eviction, and the io_uring
// refusal path (a seccomp filter in a forked child).
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/base/alloc.h"
#include "engine/base/clock.h"
#include "engine/io/reader.h"
#include "engine/io/uring_block_test_util.h"
#include "gtest/gtest.h"

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMiB = 1 << 20;

std::string TmpDir() {
  const char *d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// Word w of page p of a file with this seed.
uint32_t PatternWord(uint32_t seed, uint64_t page, size_t w) {
  return (uint32_t)(seed * 0x9E3779B1u) ^ (uint32_t)(page * 0x10001u) ^
         (uint32_t)(w * 2654435761u);
}

void FillPattern(uint32_t seed, uint64_t offset, uint8_t *dst, size_t len) {
  for (size_t i = 0; i < len; i++) {
    uint64_t pos = offset + i;  // little-endian words, any byte range
    uint32_t v = PatternWord(seed, pos / kPage, (pos % kPage) / 4);
    dst[i] = (uint8_t)(v >> (8 * (pos % 4)));
  }
}

// Index of the first byte that differs from the pattern, or -1.
long FirstMismatch(uint32_t seed, uint64_t offset, const void *data,
                   size_t len) {
  std::vector<uint8_t> want(len);
  FillPattern(seed, offset, want.data(), len);
  const uint8_t *got = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < len; i++)
    if (got[i] != want[i]) return (long)i;
  return -1;
}

std::string WritePatternFile(const std::string &name, size_t size,
                             uint32_t seed) {
  std::string path = TmpDir() + "/" + name;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0) << path << ": " << strerror(errno);
  std::vector<uint8_t> buf(kMiB);
  for (size_t off = 0; off < size; off += buf.size()) {
    size_t n = std::min(buf.size(), size - off);
    FillPattern(seed, off, buf.data(), n);
    EXPECT_EQ((ssize_t)n, pwrite(fd, buf.data(), n, (off_t)off));
  }
  fsync(fd);
  close(fd);
  return path;
}

// An aligned buffer from spill_alloc, freed on scope exit.
struct Buf {
  explicit Buf(size_t n) : size(n) {
    p = static_cast<uint8_t *>(spill_alloc_nozero(n, kPage));
  }
  ~Buf() { spill_free(p, size); }
  Buf(const Buf &) = delete;
  Buf &operator=(const Buf &) = delete;
  uint8_t *p;
  size_t size;
};

struct Combo {
  spill_io_backend backend;
  spill_io_mode mode;
};

std::string ComboName(const testing::TestParamInfo<Combo> &info) {
  return std::string(spill_io_mode_name(info.param.mode)) + "_" +
         spill_io_backend_name(info.param.backend);
}

const Combo kAllCombos[] = {
    {SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_DIRECT},
    {SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_PAGECACHE},
    {SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_MMAP},
    {SPILL_IO_BACKEND_URING, SPILL_IO_MODE_DIRECT},
    {SPILL_IO_BACKEND_URING, SPILL_IO_MODE_PAGECACHE},
};

class ReaderTest : public testing::TestWithParam<Combo> {
 protected:
  void Open(int threads = 3, int depth = 8, uint64_t throttle = 0,
            int max_pending = 0) {
    spill_io_opts o = {};
    o.backend = GetParam().backend;
    o.mode = GetParam().mode;
    o.threads = threads;
    o.depth = depth;
    o.throttle_bytes_per_s = throttle;
    o.max_pending = max_pending;
    spill_err e = {};
    int rc = spill_io_open(&o, &io_, &e);
    ASSERT_EQ(SPILL_OK, rc) << e.msg;
  }
  uint32_t Add(const std::string &path) {
    uint32_t id = 0;
    spill_err e = {};
    EXPECT_EQ(SPILL_OK, spill_io_add_file(io_, path.c_str(), &id, &e)) << e.msg;
    return id;
  }
  // Waits for exactly n completions.
  std::vector<spill_io_completion> WaitAll(int n) {
    std::vector<spill_io_completion> out(n);
    int got = 0;
    while (got < n) {
      int k = spill_io_wait(io_, out.data() + got, n - got, 1);
      EXPECT_GT(k, 0);
      if (k <= 0) break;
      got += k;
    }
    out.resize(got);
    return out;
  }
  std::string Name(const char *base) {
    return std::string(base) + "_" + spill_io_mode_name(GetParam().mode) +
           "_" + spill_io_backend_name(GetParam().backend) + ".bin";
  }
  void TearDown() override { spill_io_close(io_); }
  spill_io *io_ = nullptr;
};

TEST_P(ReaderTest, ReadsBackExactBytes) {
  const size_t size = 4 * kMiB;
  std::string path = WritePatternFile(Name("exact"), size, 7);
  Open();
  uint32_t id = Add(path);
  EXPECT_EQ(size, spill_io_file_size(io_, id));
  struct Rec {
    uint64_t off;
    size_t len;
  };
  const Rec recs[] = {{0, kPage},           {kPage, 3 * kPage},
                      {64 * kPage, 150 * kPage}, {size - kPage, kPage},
                      {size - 600 * kPage, 600 * kPage}, {17 * kPage, 25 * kPage}};
  const int n = sizeof(recs) / sizeof(recs[0]);
  std::vector<Buf *> bufs;
  for (int i = 0; i < n; i++) {
    bufs.push_back(new Buf(recs[i].len));
    memset(bufs[i]->p, 0xAB, recs[i].len);
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, recs[i].off, recs[i].len,
                                        bufs[i]->p, 100 + i));
  }
  auto cs = WaitAll(n);
  ASSERT_EQ(n, (int)cs.size());
  for (const auto &c : cs) {
    int i = (int)(c.tag - 100);
    ASSERT_GE(i, 0);
    ASSERT_LT(i, n);
    EXPECT_EQ(SPILL_OK, c.status);
    EXPECT_EQ(recs[i].len, c.bytes);
    EXPECT_EQ(recs[i].off, c.offset);
    EXPECT_EQ((const void *)bufs[i]->p, c.data);
    EXPECT_EQ(-1, FirstMismatch(7, recs[i].off, bufs[i]->p, recs[i].len))
        << "record " << i;
  }
  for (Buf *b : bufs) delete b;
  spill_io_stats st;
  spill_io_get_stats(io_, &st);
  EXPECT_EQ((uint64_t)n, st.reads_ok);
  EXPECT_EQ(0u, st.reads_failed);
  uint64_t total = 0;
  for (const Rec &r : recs) total += r.len;
  EXPECT_EQ(total, st.bytes_read);
  EXPECT_EQ(total, st.bytes_direct + st.bytes_buffered + st.bytes_mmap);
  if (GetParam().mode == SPILL_IO_MODE_MMAP) EXPECT_EQ(total, st.bytes_mmap);
  if (GetParam().mode == SPILL_IO_MODE_PAGECACHE)
    EXPECT_EQ(total, st.bytes_buffered);
}

TEST_P(ReaderTest, ManyConcurrentRequestsCompleteExactlyOnceWithTheirTags) {
  const size_t size = 2 * kMiB, rec = 16 * kPage;
  std::string path = WritePatternFile(Name("many"), size, 11);
  Open(/*threads=*/3, /*depth=*/8);
  uint32_t id = Add(path);
  const int n = 200;  // far more than depth: submit has to block and resume
  Buf buf(n * rec);
  std::vector<int> seen(n, 0);
  auto check = [&](const spill_io_completion *c, int k) {
    for (int j = 0; j < k; j++) {
      int i = (int)(c[j].tag >> 32);
      uint64_t off = c[j].tag & 0xffffffffu;
      ASSERT_LT(i, n);
      seen[i]++;
      EXPECT_EQ(SPILL_OK, c[j].status);
      EXPECT_EQ(off, c[j].offset);
      EXPECT_EQ(rec, c[j].bytes);
      EXPECT_EQ(-1, FirstMismatch(11, off, buf.p + (size_t)i * rec, rec));
    }
  };
  spill_io_completion c[16];
  for (int i = 0; i < n; i++) {
    uint64_t off = (uint64_t)((i * 37) % (size / rec)) * rec;
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, off, rec, buf.p + i * rec,
                                        (uint64_t)i << 32 | off));
    if (i % 50 == 49) {  // interleave partial reaping with submission
      int k = spill_io_wait(io_, c, 4, 0);
      ASSERT_GE(k, 0);
      check(c, k);
    }
  }
  while (spill_io_outstanding(io_) > 0) {
    int k = spill_io_wait(io_, c, 16, 1);
    ASSERT_GT(k, 0);
    check(c, k);
  }
  spill_io_stats st;
  spill_io_get_stats(io_, &st);
  EXPECT_EQ((uint64_t)n, st.reads_ok);
  EXPECT_EQ((uint64_t)n * rec, st.bytes_read);
  for (int i = 0; i < n; i++) EXPECT_EQ(1, seen[i]) << "tag " << i;
  EXPECT_EQ(0, spill_io_wait(io_, c, 16, 5));  // nothing left: no block
}

TEST_P(ReaderTest, EioIsReportedForThatRequestOnly) {
  const size_t size = kMiB;
  std::string path = WritePatternFile(Name("eio"), size, 3);
  Open();
  uint32_t id = Add(path);
  spill_io_fault_plan plan;
  spill_io_fault_plan_init(&plan);
  spill_io_fault_rule r = {};
  r.file_id = id;
  r.offset = 5 * 8 * kPage;
  r.fault.kind = SPILL_IO_FAULT_ERROR;
  r.fault.err = EIO;
  ASSERT_EQ(SPILL_OK, spill_io_fault_plan_add(&plan, &r));
  spill_io_set_fault_hook(io_, spill_io_fault_plan_hook, &plan);
  const int n = 10;
  Buf buf(n * 8 * kPage);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)i * 8 * kPage,
                                        8 * kPage, buf.p + i * 8 * kPage, i));
  auto cs = WaitAll(n);
  ASSERT_EQ(n, (int)cs.size());
  for (const auto &c : cs) {
    if (c.tag == 5) {
      EXPECT_EQ(SPILL_E_IO, c.status);
      EXPECT_EQ(EIO, c.sys_errno);
      EXPECT_EQ(nullptr, c.data);
      spill_err e = {};
      EXPECT_EQ(SPILL_E_IO, spill_io_describe(io_, &c, &e));
      EXPECT_NE(nullptr, strstr(e.msg, path.c_str())) << e.msg;
      EXPECT_NE(nullptr, strstr(e.msg, "offset 163840")) << e.msg;
    } else {
      EXPECT_EQ(SPILL_OK, c.status) << "tag " << c.tag;
      EXPECT_EQ(-1, FirstMismatch(3, c.offset, c.data, 8 * kPage));
    }
  }
  EXPECT_EQ(1u, spill_io_fault_plan_fired(&plan, 0));
  spill_io_stats st;
  spill_io_get_stats(io_, &st);
  EXPECT_EQ(1u, st.reads_failed);
  EXPECT_EQ((uint64_t)n - 1, st.reads_ok);
}

TEST_P(ReaderTest, ErrorByCountHitsExactlyOneRequest) {
  std::string path = WritePatternFile(Name("count"), kMiB, 4);
  Open();
  uint32_t id = Add(path);
  spill_io_fault_plan plan;
  spill_io_fault_plan_init(&plan);
  spill_io_fault_rule r = {};
  r.file_id = SPILL_IO_ANY_FILE;
  r.offset = SPILL_IO_ANY_OFFSET;
  r.skip = 3;
  r.times = 1;
  r.fault.kind = SPILL_IO_FAULT_ERROR;  // err 0 means EIO
  ASSERT_EQ(SPILL_OK, spill_io_fault_plan_add(&plan, &r));
  spill_io_set_fault_hook(io_, spill_io_fault_plan_hook, &plan);
  const int n = 12;
  Buf buf(n * kPage);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)i * kPage, kPage,
                                        buf.p + i * kPage, i));
  int failed = 0;
  for (const auto &c : WaitAll(n)) {
    if (c.status != SPILL_OK) {
      failed++;
      EXPECT_EQ(SPILL_E_IO, c.status);
      EXPECT_EQ(EIO, c.sys_errno);
    }
  }
  EXPECT_EQ(1, failed);
}

TEST_P(ReaderTest, InjectedShortReadsAreRetriedToCompletion) {
  const size_t size = 2 * kMiB, rec = 64 * kPage;
  std::string path = WritePatternFile(Name("short"), size, 5);
  Open();
  uint32_t id = Add(path);
  spill_io_fault_plan plan;
  spill_io_fault_plan_init(&plan);
  spill_io_fault_rule r = {};
  r.file_id = SPILL_IO_ANY_FILE;
  r.offset = SPILL_IO_ANY_OFFSET;
  r.fault.kind = SPILL_IO_FAULT_SHORT;
  r.fault.short_len = 3 * kPage + 100;  // direct mode rounds to 3 pages
  ASSERT_EQ(SPILL_OK, spill_io_fault_plan_add(&plan, &r));
  spill_io_set_fault_hook(io_, spill_io_fault_plan_hook, &plan);
  const int n = 6;
  Buf buf(n * rec);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)i * rec, rec,
                                        buf.p + i * rec, i));
  for (const auto &c : WaitAll(n)) {
    EXPECT_EQ(SPILL_OK, c.status);
    EXPECT_EQ(rec, c.bytes);
    EXPECT_EQ(-1, FirstMismatch(5, c.offset, buf.p + c.tag * rec, rec));
  }
  spill_io_stats st;
  spill_io_get_stats(io_, &st);
  // Every attempt is short, so a 64-page record needs many attempts.
  EXPECT_GE(st.short_retries, (uint64_t)n * 10);
  EXPECT_GE(st.attempts, (uint64_t)n * 11);
}

TEST_P(ReaderTest, ReadPastEndOfFileIsShortRead) {
  const size_t size = kMiB;
  std::string path = WritePatternFile(Name("eof"), size, 6);
  Open();
  uint32_t id = Add(path);
  Buf buf(8 * kPage), ok(kPage);
  ASSERT_EQ(SPILL_OK,
            spill_io_submit(io_, id, size - 2 * kPage, 8 * kPage, buf.p, 1));
  ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, size, 4 * kPage, buf.p, 2));
  ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, 0, kPage, ok.p, 3));
  for (const auto &c : WaitAll(3)) {
    if (c.tag == 3) {
      EXPECT_EQ(SPILL_OK, c.status);
      continue;
    }
    EXPECT_EQ(SPILL_E_SHORT_READ, c.status) << "tag " << c.tag;
    EXPECT_EQ(c.tag == 1 ? 2 * kPage : 0, c.bytes);
    spill_err e = {};
    EXPECT_EQ(SPILL_E_SHORT_READ, spill_io_describe(io_, &c, &e));
    EXPECT_NE(nullptr, strstr(e.msg, path.c_str())) << e.msg;
    EXPECT_NE(nullptr, strstr(e.msg, std::to_string(c.offset).c_str()))
        << e.msg;
  }
}

TEST_P(ReaderTest, LatencySpikeDelaysOnlyItsRequest) {
  std::string path = WritePatternFile(Name("spike"), kMiB, 8);
  Open(/*threads=*/4, /*depth=*/8);
  uint32_t id = Add(path);
  spill_io_fault_plan plan;
  spill_io_fault_plan_init(&plan);
  spill_io_fault_rule r = {};
  r.file_id = id;
  r.offset = 2 * kPage;
  r.fault.kind = SPILL_IO_FAULT_DELAY;
  r.fault.delay_ns = 150 * 1000000ull;
  ASSERT_EQ(SPILL_OK, spill_io_fault_plan_add(&plan, &r));
  spill_io_set_fault_hook(io_, spill_io_fault_plan_hook, &plan);
  spill_io_latency_reset(io_);
  Buf buf(4 * kPage);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)i * kPage, kPage,
                                        buf.p + i * kPage, i));
  auto cs = WaitAll(4);
  ASSERT_EQ(4u, cs.size());
  EXPECT_EQ(2u, cs.back().tag);  // arrival order: the slow one comes last
  for (const auto &c : cs) {
    EXPECT_EQ(SPILL_OK, c.status);
    if (c.tag == 2)
      EXPECT_GE(c.latency_ns, 150 * 1000000ull);
    else
      EXPECT_LT(c.latency_ns, 150 * 1000000ull);
  }
  spill_io_latency_stats ls;
  spill_io_get_latency(io_, &ls);
  EXPECT_EQ(4u, ls.latency.count);
  EXPECT_GE(ls.latency.max_ns, 150 * 1000000ull);
  EXPECT_LE(ls.latency.p50_ns, ls.latency.p99_ns);
  EXPECT_LE(ls.latency.p99_ns, ls.latency.max_ns);
  EXPECT_LT(ls.latency.p50_ns, 150 * 1000000ull);
  EXPECT_GE(ls.latency.p99_ns, 140 * 1000000ull);  // histogram resolution
  spill_io_latency_reset(io_);
  spill_io_get_latency(io_, &ls);
  EXPECT_EQ(0u, ls.latency.count);
  EXPECT_EQ(0u, ls.service.count);
}

TEST_P(ReaderTest, ThrottleCapsBandwidth) {
  // 64 MB at 128 MB/s: 0.5 s of tokens minus the 50 ms burst.
  const size_t size = 4 * kMiB, rec = kMiB;
  std::string path = WritePatternFile(Name("throttle"), size, 9);
  Open(/*threads=*/2, /*depth=*/8, /*throttle=*/128ull * kMiB);
  uint32_t id = Add(path);
  Buf buf(8 * rec);
  uint64_t t0 = spill_clock_ns();
  const int n = 64;
  int done = 0;
  // Completions arrive in any order, so a buffer slot is reused only after
  // the request that used it (tag = slot) has completed.
  int free_slots[8], nfree = 8;
  for (int j = 0; j < 8; j++) free_slots[j] = j;
  for (int i = 0; i < n; i++) {
    while (nfree == 0) {
      spill_io_completion c[8];
      int k = spill_io_wait(io_, c, 8, 1);
      ASSERT_GT(k, 0);
      for (int j = 0; j < k; j++) {
        EXPECT_EQ(SPILL_OK, c[j].status);
        free_slots[nfree++] = (int)c[j].tag;
      }
      done += k;
    }
    int slot = free_slots[--nfree];
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)(i % 4) * rec, rec,
                                        buf.p + slot * rec, (uint64_t)slot));
  }
  done += (int)WaitAll(n - done).size();
  double s = (double)(spill_clock_ns() - t0) / 1e9;
  EXPECT_EQ(n, done);
  EXPECT_GE(s, 0.44) << "64 MB at a 128 MB/s cap took " << s << " s";
  spill_io_stats st;
  spill_io_get_stats(io_, &st);
  EXPECT_GT(st.throttle_wait_ns, 0u);
}

int ThreadCount() {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

// Close with reads queued and in flight returns promptly, leaves no thread
// of the reader behind, and nothing writes into the caller's buffers once it
// has returned (the buffers may be freed right after close). Every 16-page
// chunk holds either the file's bytes (its read ran) or still the marker it
// was filled with (dropped before it ran): never other bytes.
TEST_P(ReaderTest, CloseWithRequestsInFlightDoesNotHang) {
  std::string path = WritePatternFile(Name("close"), kMiB, 10);
  int threads_before = ThreadCount();
  Open(/*threads=*/2, /*depth=*/4);
  uint32_t id = Add(path);
  const size_t chunk = 16 * kPage;
  Buf buf(16 * chunk);
  memset(buf.p, 0xA5, buf.size);
  for (int i = 0; i < 16; i++)
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)i * chunk, chunk, buf.p + i * chunk, i));
  uint64_t t0 = spill_clock_ns();
  spill_io_close(io_);
  io_ = nullptr;
  double close_s = (double)(spill_clock_ns() - t0) / 1e9;
  EXPECT_LT(close_s, 10.0) << "close took " << close_s << " s";
  EXPECT_EQ(ThreadCount(), threads_before) << "reader threads outlived close";
  std::vector<uint8_t> after(buf.p, buf.p + buf.size);
  usleep(50 * 1000);
  EXPECT_EQ(0, memcmp(after.data(), buf.p, buf.size)) << "a read wrote after close returned";
  std::vector<uint8_t> want(chunk), marker(chunk, 0xA5);
  for (int i = 0; i < 16; i++) {
    FillPattern(10, (uint64_t)i * chunk, want.data(), chunk);
    bool read = !memcmp(buf.p + i * chunk, want.data(), chunk);
    bool untouched = !memcmp(buf.p + i * chunk, marker.data(), chunk);
    EXPECT_TRUE(read || untouched) << "chunk " << i << " holds neither the file's bytes nor the marker";
  }
}

TEST_P(ReaderTest, MaxPendingBoundsUnreapedRequests) {
  std::string path = WritePatternFile(Name("pending"), kMiB, 12);
  Open(/*threads=*/2, /*depth=*/2, 0, /*max_pending=*/4);
  uint32_t id = Add(path);
  Buf buf(5 * kPage);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(SPILL_OK, spill_io_submit(io_, id, (uint64_t)i * kPage, kPage,
                                        buf.p + i * kPage, i));
  EXPECT_EQ(SPILL_E_RANGE, spill_io_submit(io_, id, 0, kPage, buf.p, 9));
  EXPECT_EQ(4u, WaitAll(4).size());
  EXPECT_EQ(SPILL_OK, spill_io_submit(io_, id, 0, kPage, buf.p, 9));
  EXPECT_EQ(1u, WaitAll(1).size());
}

TEST_P(ReaderTest, RejectsBadRequests) {
  std::string path = WritePatternFile(Name("bad"), kMiB, 13);
  Open();
  uint32_t id = Add(path);
  Buf buf(4 * kPage), b2(2 * kPage), b3(kPage), b4(kPage);
  EXPECT_EQ(SPILL_E_INVALID_ARG, spill_io_submit(io_, id, 0, 0, buf.p, 1));
  EXPECT_EQ(SPILL_E_RANGE, spill_io_submit(io_, id + 1, 0, kPage, buf.p, 1));
  if (GetParam().mode == SPILL_IO_MODE_MMAP)
    EXPECT_EQ(SPILL_OK, spill_io_submit(io_, id, 0, kPage, nullptr, 1));
  else
    EXPECT_EQ(SPILL_E_INVALID_ARG,
              spill_io_submit(io_, id, 0, kPage, nullptr, 1));
  bool direct = GetParam().mode == SPILL_IO_MODE_DIRECT;
  int want = direct ? SPILL_E_INVALID_ARG : SPILL_OK;
  EXPECT_EQ(want, spill_io_submit(io_, id, 0, kPage, b2.p + 512, 2))
      << "misaligned buffer";
  EXPECT_EQ(want, spill_io_submit(io_, id, 512, kPage, b3.p, 3))
      << "misaligned offset";
  EXPECT_EQ(want, spill_io_submit(io_, id, 0, 1000, b4.p, 4))
      << "length not a page multiple";
  while (spill_io_outstanding(io_) > 0) {
    spill_io_completion c[4];
    int k = spill_io_wait(io_, c, 4, 1);
    ASSERT_GT(k, 0);
    for (int j = 0; j < k; j++) {
      EXPECT_EQ(SPILL_OK, c[j].status);
      EXPECT_EQ(-1, FirstMismatch(13, c[j].offset, c[j].data, c[j].bytes));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllModes, ReaderTest, testing::ValuesIn(kAllCombos),
                         ComboName);

// ---- mode- or backend-specific tests ----

spill_io *OpenOrDie(spill_io_backend b, spill_io_mode m, int threads = 2,
                    int depth = 8) {
  spill_io_opts o = {};
  o.backend = b;
  o.mode = m;
  o.threads = threads;
  o.depth = depth;
  spill_io *io = nullptr;
  spill_err e = {};
  EXPECT_EQ(SPILL_OK, spill_io_open(&o, &io, &e)) << e.msg;
  return io;
}

TEST(ReaderMmapTest, ViewPointsIntoTheMappingWithoutCopying) {
  const size_t size = 2 * kMiB;
  std::string path = WritePatternFile("mmap_view.bin", size, 21);
  spill_io *io = OpenOrDie(SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_MMAP);
  uint32_t id;
  spill_err e = {};
  ASSERT_EQ(SPILL_OK, spill_io_add_file(io, path.c_str(), &id, &e)) << e.msg;
  // Views need no alignment at all.
  ASSERT_EQ(SPILL_OK, spill_io_submit(io, id, 100 * kPage + 12, 300 * kPage,
                                      nullptr, 1));
  ASSERT_EQ(SPILL_OK, spill_io_submit(io, id, 0, kPage, nullptr, 2));
  spill_io_completion c[2];
  int got = 0;
  while (got < 2) got += spill_io_wait(io, c + got, 2 - got, 1);
  const uint8_t *base = nullptr;
  for (auto &x : c) {
    ASSERT_EQ(SPILL_OK, x.status);
    if (x.tag == 2) base = static_cast<const uint8_t *>(x.data);
  }
  for (auto &x : c) {
    EXPECT_EQ(base + x.offset, x.data) << "view is mapping + offset";
    EXPECT_EQ(-1, FirstMismatch(21, x.offset, x.data, x.len));
  }
  spill_io_stats st;
  spill_io_get_stats(io, &st);
  EXPECT_EQ(301 * kPage, st.bytes_mmap);
  spill_io_close(io);
}

TEST(ReaderDirectTest, UsesODirectOrReportsTheFallback) {
  std::string path = WritePatternFile("direct_flag.bin", kMiB, 22);
  for (auto b : {SPILL_IO_BACKEND_PREAD, SPILL_IO_BACKEND_URING}) {
    spill_io *io = OpenOrDie(b, SPILL_IO_MODE_DIRECT);
    uint32_t id;
    spill_err e = {};
    ASSERT_EQ(SPILL_OK, spill_io_add_file(io, path.c_str(), &id, &e)) << e.msg;
    Buf buf(16 * kPage);
    ASSERT_EQ(SPILL_OK, spill_io_submit(io, id, 0, 16 * kPage, buf.p, 1));
    spill_io_completion c;
    ASSERT_EQ(1, spill_io_wait(io, &c, 1, 1));
    EXPECT_EQ(SPILL_OK, c.status);
    spill_io_stats st;
    spill_io_get_stats(io, &st);
    if (spill_io_file_is_direct(io, id) == 1) {
      EXPECT_EQ(0u, st.files_direct_fallback);
      EXPECT_EQ(16 * kPage, st.bytes_direct);
    } else {
      printf("NOTE: %s refuses O_DIRECT; the reader fell back to buffered "
             "reads and reported it (fallback path checked instead)\n",
             TmpDir().c_str());
      EXPECT_EQ(0, spill_io_file_is_direct(io, id));
      EXPECT_EQ(1u, st.files_direct_fallback);
      EXPECT_EQ(16 * kPage, st.bytes_buffered);
    }
    spill_io_close(io);
  }
}

TEST(ReaderDirectTest, FallsBackToBufferedWhenFilesystemRefusesODirect) {
  // procfs refuses O_DIRECT at open (EINVAL), like some FUSE and network
  // filesystems: a real instance of the fallback path on any machine.
  const char *path = "/proc/version";
  int fd = open(path, O_RDONLY | O_DIRECT);
  if (fd >= 0 || errno != EINVAL) {
    if (fd >= 0) close(fd);
    GTEST_SKIP() << path << " accepts O_DIRECT here; fallback not testable";
  }
  char want[4096];
  int vfd = open(path, O_RDONLY);
  ASSERT_GE(vfd, 0);
  ssize_t wn = read(vfd, want, sizeof want);
  close(vfd);
  ASSERT_GT(wn, 0);
  spill_io *io = OpenOrDie(SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_DIRECT);
  uint32_t id;
  spill_err e = {};
  ASSERT_EQ(SPILL_OK, spill_io_add_file(io, path, &id, &e)) << e.msg;
  EXPECT_EQ(0, spill_io_file_is_direct(io, id));
  spill_io_stats st;
  spill_io_get_stats(io, &st);
  EXPECT_EQ(1u, st.files_direct_fallback);
  Buf buf(kPage);
  ASSERT_EQ(SPILL_OK, spill_io_submit(io, id, 0, kPage, buf.p, 1));
  spill_io_completion c;
  ASSERT_EQ(1, spill_io_wait(io, &c, 1, 1));
  // The file is shorter than a page: a short read whose bytes are the file.
  EXPECT_EQ(SPILL_E_SHORT_READ, c.status);
  ASSERT_EQ((size_t)wn, c.bytes);
  EXPECT_EQ(0, memcmp(want, buf.p, (size_t)wn));
  spill_io_close(io);
}

TEST(ReaderOpenTest, RejectsBadOptionsAndFiles) {
  spill_io_opts o = {};
  spill_io *io = nullptr;
  spill_err e = {};
  o.backend = SPILL_IO_BACKEND_URING;
  o.mode = SPILL_IO_MODE_MMAP;
  EXPECT_EQ(SPILL_E_INVALID_ARG, spill_io_open(&o, &io, &e));
  EXPECT_NE(nullptr, strstr(e.msg, "mmap")) << e.msg;
  EXPECT_EQ(nullptr, io);
  o = {};
  o.threads = 1000;
  EXPECT_EQ(SPILL_E_INVALID_ARG, spill_io_open(&o, &io, &e));
  o = {};
  o.depth = -3;
  EXPECT_EQ(SPILL_E_INVALID_ARG, spill_io_open(&o, &io, &e));
  o = {};
  o.mode = (spill_io_mode)7;
  EXPECT_EQ(SPILL_E_INVALID_ARG, spill_io_open(&o, &io, &e));

  io = OpenOrDie(SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_PAGECACHE);
  uint32_t id;
  std::string missing = TmpDir() + "/does_not_exist.bin";
  EXPECT_EQ(SPILL_E_IO, spill_io_add_file(io, missing.c_str(), &id, &e));
  EXPECT_NE(nullptr, strstr(e.msg, missing.c_str())) << e.msg;
  EXPECT_EQ(SPILL_E_IO, spill_io_add_file(io, TmpDir().c_str(), &id, &e));
  EXPECT_EQ(SPILL_E_RANGE, spill_io_file_is_direct(io, 0));
  spill_io_close(io);
  spill_io_close(nullptr);
}

bool OnTmpfs(const std::string &path) {
  struct statfs sf;
  return statfs(path.c_str(), &sf) == 0 && sf.f_type == 0x01021994;
}

size_t ResidentPages(const std::string &path, size_t size) {
  int fd = open(path.c_str(), O_RDONLY);
  void *m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return (size_t)-1;
  std::vector<unsigned char> vec(size / kPage);
  mincore(m, size, vec.data());
  munmap(m, size);
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

TEST(ReaderEvictTest, EvictFileDropsThePageCache) {
  const size_t size = 2 * kMiB;
  std::string path = WritePatternFile("evict.bin", size, 23);
  if (OnTmpfs(path))
    GTEST_SKIP() << TmpDir() << " is tmpfs, whose pages cannot be evicted";
  spill_io *io = OpenOrDie(SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_PAGECACHE);
  uint32_t id;
  spill_err e = {};
  ASSERT_EQ(SPILL_OK, spill_io_add_file(io, path.c_str(), &id, &e)) << e.msg;
  Buf buf(size);
  ASSERT_EQ(SPILL_OK, spill_io_submit(io, id, 0, size, buf.p, 1));
  spill_io_completion c;
  ASSERT_EQ(1, spill_io_wait(io, &c, 1, 1));
  ASSERT_EQ(SPILL_OK, c.status);
  EXPECT_GT(ResidentPages(path, size), size / kPage / 2);
  ASSERT_EQ(SPILL_OK, spill_io_evict_file(io, id, &e)) << e.msg;
  EXPECT_LT(ResidentPages(path, size), size / kPage / 10);
  EXPECT_EQ(SPILL_E_RANGE, spill_io_evict_file(io, id + 5, &e));
  spill_io_close(io);
}

TEST(ReaderUringTest, RefusedIoUringGivesUnsupportedWithReason) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "seccomp filter written for x86-64";
#endif
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!spill_test_block_io_uring_setup()) _exit(3);
    spill_io_opts o = {};
    o.backend = SPILL_IO_BACKEND_URING;
    o.mode = SPILL_IO_MODE_DIRECT;
    spill_io *io = nullptr;
    spill_err e = {};
    int rc = spill_io_open(&o, &io, &e);
    if (rc != SPILL_E_UNSUPPORTED || io != nullptr) _exit(1);
    if (!strstr(e.msg, "io_uring") || !strstr(e.msg, "not permitted")) _exit(2);
    // The pread backend still works under the same filter.
    o.backend = SPILL_IO_BACKEND_PREAD;
    if (spill_io_open(&o, &io, &e) != SPILL_OK) _exit(4);
    spill_io_close(io);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(pid, waitpid(pid, &st, 0));
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 3)
    GTEST_SKIP() << "cannot install a seccomp filter here";
  EXPECT_EQ(0, WEXITSTATUS(st))
      << "1: wrong status, 2: message lacks reason, 4: pread broken";
}

}  // namespace
