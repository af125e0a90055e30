// bench/reader_bench.cc: random record reads through engine/io (reader.h)
// on a 1.5 GiB file, pread pool vs io_uring, O_DIRECT vs buffered.
//
// The file is $SPILL_BENCH_FILE or cache/bench-reader.bin under the working
// directory (./lab bench runs from the repo root, so /work/main/cache/); it
// is written with pseudo-random bytes if missing or of another size, and
// deleted at exit when this process created it, unless SPILL_BENCH_KEEP=1
// (./lab bench keeps it for its fio comparison, then deletes it).
//
// Each iteration is one completed read in a steady pipeline: the loop keeps
// `depth` reads submitted (offsets uniformly random, record-aligned) and
// reaps one. Args:
//   BM_ReadPread_{Direct,Buffered}: threads, depth, record KiB
//   BM_ReadUring_{Direct,Buffered}: depth, record KiB
// Record sizes: 256 KiB (mini's expert record) and 1540 KiB (the twin's).
// Buffered runs start with the file evicted from the page cache; over a run
// some reads hit pages earlier reads brought in (the file is 1.5 GiB), so
// buffered rates are an upper bound of a cold device.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/base/alloc.h"
#include "engine/io/reader.h"

namespace {

constexpr uint64_t kFileBytes = 1536ull << 20;

struct BenchFile {
  std::string path;
  bool created = false;
  ~BenchFile() {
    const char *keep = std::getenv("SPILL_BENCH_KEEP");
    if (created && !(keep && keep[0] == '1')) unlink(path.c_str());
  }
};

BenchFile g_file;

// Returns "" on success, else the reason.
std::string EnsureFile() {
  if (!g_file.path.empty()) return "";
  const char *p = std::getenv("SPILL_BENCH_FILE");
  g_file.path = p && *p ? p : "cache/bench-reader.bin";
  struct stat st;
  if (stat(g_file.path.c_str(), &st) == 0 && (uint64_t)st.st_size == kFileBytes) return "";
  const int fd = open(g_file.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return "cannot create " + g_file.path;
  g_file.created = true;
  std::vector<uint64_t> buf((8u << 20) / 8);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t done = 0; done < kFileBytes; done += buf.size() * 8) {
    for (auto &v : buf) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v = x;
    }
    if (pwrite(fd, buf.data(), buf.size() * 8, (off_t)done) != (ssize_t)(buf.size() * 8)) {
      close(fd);
      return "short write to " + g_file.path;
    }
  }
  fsync(fd);
  close(fd);
  return "";
}

void Run(benchmark::State &state, spill_io_backend backend, spill_io_mode mode, int threads,
         int depth, size_t rec) {
  const std::string why = EnsureFile();
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  spill_io_opts o{};
  o.backend = backend;
  o.mode = mode;
  o.threads = threads;
  o.depth = depth;
  spill_io *io = nullptr;
  spill_err e{};
  if (spill_io_open(&o, &io, &e) < 0) {
    state.SkipWithError(e.msg);
    return;
  }
  uint32_t fid = 0;
  if (spill_io_add_file(io, g_file.path.c_str(), &fid, &e) < 0) {
    spill_io_close(io);
    state.SkipWithError(e.msg);
    return;
  }
  if (mode == SPILL_IO_MODE_DIRECT && spill_io_file_is_direct(io, fid) != 1) {
    spill_io_close(io);
    state.SkipWithError("filesystem refused O_DIRECT");
    return;
  }
  spill_io_evict_file(io, fid, &e);
  const int nbuf = 2 * depth;
  std::vector<void *> bufs(nbuf);
  for (auto &b : bufs) b = spill_alloc_nozero(rec, SPILL_IO_ALIGN);
  const uint64_t n_rec = kFileBytes / rec;
  std::mt19937_64 rng(5);
  uint64_t seq = 0;
  spill_io_completion c;
  int failed = 0;
  for (auto _ : state) {
    while (spill_io_outstanding(io) < depth) {
      const uint64_t off = (rng() % n_rec) * rec;
      if (spill_io_submit(io, fid, off, rec, bufs[seq % nbuf], seq) < 0) break;
      seq++;
    }
    if (spill_io_wait(io, &c, 1, 1) == 1 && c.status != SPILL_OK) failed++;
  }
  while (spill_io_outstanding(io) > 0) spill_io_wait(io, &c, 1, 1);
  spill_io_latency_stats lat;
  spill_io_get_latency(io, &lat);
  state.counters["p50_ms"] = lat.latency.p50_ns / 1e6;
  state.counters["p99_ms"] = lat.latency.p99_ns / 1e6;
  spill_io_close(io);
  for (auto &b : bufs) spill_free(b, rec);
  if (failed) state.SkipWithError("read errors");
  state.SetBytesProcessed((int64_t)(state.iterations() * rec));
  state.SetItemsProcessed((int64_t)state.iterations());
}

void BM_ReadPread_Direct(benchmark::State &s) {
  Run(s, SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_DIRECT, (int)s.range(0), (int)s.range(1),
      (size_t)s.range(2) << 10);
}
void BM_ReadPread_Buffered(benchmark::State &s) {
  Run(s, SPILL_IO_BACKEND_PREAD, SPILL_IO_MODE_PAGECACHE, (int)s.range(0), (int)s.range(1),
      (size_t)s.range(2) << 10);
}
void BM_ReadUring_Direct(benchmark::State &s) {
  Run(s, SPILL_IO_BACKEND_URING, SPILL_IO_MODE_DIRECT, 1, (int)s.range(0),
      (size_t)s.range(1) << 10);
}
void BM_ReadUring_Buffered(benchmark::State &s) {
  Run(s, SPILL_IO_BACKEND_URING, SPILL_IO_MODE_PAGECACHE, 1, (int)s.range(0),
      (size_t)s.range(1) << 10);
}

// threads x depth for the pool (depth >= threads: a worker holds one read)
void PreadArgs(benchmark::internal::Benchmark *b) {
  for (int rec : {256, 1540})
    for (auto td : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {4, 4}, {4, 16}, {8, 8}, {8, 32}})
      b->Args({td.first, td.second, rec});
}
void UringArgs(benchmark::internal::Benchmark *b) {
  for (int rec : {256, 1540})
    for (int d : {1, 4, 8, 16, 32}) b->Args({d, rec});
}

BENCHMARK(BM_ReadPread_Direct)->Apply(PreadArgs)->UseRealTime();
BENCHMARK(BM_ReadUring_Direct)->Apply(UringArgs)->UseRealTime();
BENCHMARK(BM_ReadPread_Buffered)->Apply(PreadArgs)->UseRealTime();
BENCHMARK(BM_ReadUring_Buffered)->Apply(UringArgs)->UseRealTime();

}  // namespace
