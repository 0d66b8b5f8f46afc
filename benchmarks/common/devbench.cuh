// What the CUDA-runtime benchmarks share (sync/device_bench.cu,
// sync/floor_bench.cu, nvshmem/nvshmem_bench.cu): error checks, options,
// the run header (ranks, devices, MPS), rows of repeated measurements with
// their data check, and the two outputs, a table on stdout and one JSON
// document (--json). Header-only so that nvshmem/build.sh can compile a
// program from one .cu file outside CMake.
//
// JSON: {"benchmark", "version", "argv", "ranks", "gpus", "devices",
// "driver", "mps", "config", "rows": [{"name", "what", "path", "bytes",
// "iters", "reps", "stats" (seconds per operation: median, p10, p90, min,
// max), "samples" (seconds, one per batch), "data" ("ok", "MISMATCH" or
// "unchecked"), "mismatches", "note" | "skipped"}]}.
#ifndef VMMIPC_BENCH_DEVBENCH_CUH
#define VMMIPC_BENCH_DEVBENCH_CUH

#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace devbench {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

[[noreturn]] inline void die(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "rank %d: %s\n", world_rank(), msg);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

#define DB_CUDA(call)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) devbench::die("%s: %s", #call, cudaGetErrorString(e_));        \
  } while (0)

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- options: --name value, --flag ---------------------------------------------

struct Args {
  int argc;
  char **argv;
  const char *get(const char *name, const char *dflt = nullptr) const {
    for (int i = 1; i + 1 < argc; i++)
      if (argv[i][0] == '-' && argv[i][1] == '-' && std::strcmp(argv[i] + 2, name) == 0) return argv[i + 1];
    return dflt;
  }
  long num(const char *name, long dflt) const {
    const char *v = get(name);
    if (!v) return dflt;
    char *end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (!*v || *end || x < 0) die("--%s %s: expected a count", name, v);
    return x;
  }
  bool flag(const char *name) const {
    for (int i = 1; i < argc; i++)
      if (argv[i][0] == '-' && argv[i][1] == '-' && std::strcmp(argv[i] + 2, name) == 0) return true;
    return false;
  }
  // "a,b,c" contains item (an empty or missing list: every item).
  bool has(const char *name, const char *item) const {
    const char *v = get(name);
    if (!v || !*v) return true;
    std::string s = std::string(",") + v + ",", want = std::string(",") + item + ",";
    return s.find(want) != std::string::npos;
  }
};

// ---- statistics ----------------------------------------------------------------

struct Stats {
  double median = NAN, p10 = NAN, p90 = NAN, min = NAN, max = NAN;
};

inline double pct(const std::vector<double> &s, double p) {
  double pos = p * (double)(s.size() - 1);
  size_t lo = (size_t)std::floor(pos), hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (s[hi] - s[lo]) * (pos - (double)lo);
}

inline Stats stats(std::vector<double> v) {
  Stats st;
  if (v.empty()) return st;
  std::sort(v.begin(), v.end());
  st.median = pct(v, 0.5);
  st.p10 = pct(v, 0.1);
  st.p90 = pct(v, 0.9);
  st.min = v.front();
  st.max = v.back();
  return st;
}

// Every rank passes its value; all get the maximum (a batch takes as long
// as its slowest rank).
inline double max_over_ranks(double v) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

inline long sum_over_ranks(long v) {
  long s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

// ---- rows ----------------------------------------------------------------------

enum Data { UNCHECKED = -1, MISMATCH = 0, OK = 1 };

struct Row {
  std::string name, what, path, note, skipped;
  long bytes = -1; // message size; -1: none
  long iters = 0;  // operations per batch
  std::vector<double> samples; // seconds per operation, one per batch
  int data = UNCHECKED;
  long mismatches = 0;
  bool expected = false; // a MISMATCH the row expects (an unordered variant): not a failure
};

inline std::string json_str(const std::string &s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += (char)c;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += (char)c;
    }
  }
  return o + "\"";
}

inline std::string json_num(double x) {
  if (!std::isfinite(x)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}

inline const char *data_str(int d) { return d == OK ? "ok" : d == MISMATCH ? "MISMATCH" : "unchecked"; }

class Report {
 public:
  Report(const char *benchmark, int argc, char **argv) : bench_(benchmark), args_{argc, argv} {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  // Call after cudaSetDevice: every rank's device, gathered on rank 0.
  void devices() {
    cudaDeviceProp p;
    int dev = 0;
    DB_CUDA(cudaGetDevice(&dev));
    DB_CUDA(cudaGetDeviceProperties(&p, dev));
    char mine[2][256] = {{0}, {0}};
    std::snprintf(mine[0], sizeof mine[0], "%s", p.name);
    const unsigned char *u = reinterpret_cast<const unsigned char *>(p.uuid.bytes);
    std::snprintf(mine[1], sizeof mine[1],
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                  u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    std::vector<char> all((size_t)size_ * sizeof mine);
    MPI_Gather(mine, (int)sizeof mine, MPI_CHAR, all.data(), (int)sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
    for (int r = 0; r < size_; r++) {
      const char *e = all.data() + (size_t)r * sizeof mine;
      names_.push_back(e);
      uuids_.push_back(e + 256);
    }
    cudaDriverGetVersion(&driver_);
  }
  void config(const std::string &key, const std::string &json_value) { config_.push_back({key, json_value}); }
  // Rank 0 keeps the rows; the others may add them too (ignored).
  void add(const Row &r) {
    if (rank_ == 0) rows_.push_back(r);
  }
  int gpus() const {
    std::vector<std::string> u = uuids_;
    std::sort(u.begin(), u.end());
    return (int)(std::unique(u.begin(), u.end()) - u.begin());
  }
  int failures() const {
    int n = 0;
    for (const Row &r : rows_) n += r.data == MISMATCH && !r.expected;
    return n;
  }

  // The table on stdout, then the JSON file; rank 0 only.
  void finish() {
    if (rank_ != 0) return;
    const char *mps = std::getenv("VMMIPC_BENCH_MPS");
    const char *pct = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    std::printf("\n%s: %d ranks on %d GPU(s)%s; MPS: %s%s%s\n", bench_.c_str(), size_, gpus(),
                names_.empty() ? "" : (" (" + names_[0] + ")").c_str(),
                mps ? (std::strcmp(mps, "1") == 0 ? "on" : "off") : "not said (VMMIPC_BENCH_MPS unset)",
                pct ? ", active thread percentage " : "", pct ? pct : "");
    std::printf("%-34s %-14s %9s %10s %10s %10s %7s %5s  %s\n", "row", "path", "bytes", "median us", "p10 us",
                "p90 us", "iters", "reps", "data / note");
    for (const Row &r : rows_) {
      char bytes[24] = "-";
      if (r.bytes >= 0) std::snprintf(bytes, sizeof bytes, "%ld", r.bytes);
      if (!r.skipped.empty()) {
        std::printf("%-34s %-14s %9s %10s  skipped: %s\n", r.name.c_str(), r.path.c_str(), bytes, "-",
                    r.skipped.c_str());
        continue;
      }
      Stats s = stats(r.samples);
      std::printf("%-34s %-14s %9s %10.3f %10.3f %10.3f %7ld %5zu  %s%s%s\n", r.name.c_str(), r.path.c_str(), bytes,
                  s.median * 1e6, s.p10 * 1e6, s.p90 * 1e6, r.iters, r.samples.size(), data_str(r.data),
                  r.note.empty() ? "" : "; ", r.note.c_str());
    }
    std::fflush(stdout);
    const char *path = args_.get("json");
    if (path) write_json(path, mps, pct);
  }

 private:
  void write_json(const char *path, const char *mps, const char *pct) {
    FILE *f = std::fopen(path, "w");
    if (!f) {
      std::perror(path);
      return;
    }
    std::string o = "{\"benchmark\": " + json_str(bench_) + ", \"argv\": [";
    for (int i = 0; i < args_.argc; i++) o += (i ? ", " : "") + json_str(args_.argv[i]);
    o += "], \"ranks\": " + std::to_string(size_) + ", \"gpus\": " + std::to_string(gpus()) + ", \"devices\": [";
    for (size_t i = 0; i < names_.size(); i++)
      o += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(i) + ", \"name\": " + json_str(names_[i]) +
           ", \"uuid\": " + json_str(uuids_[i]) + "}";
    o += "], \"driver\": {\"version\": " + std::to_string(driver_) + "}";
    o += ", \"mps\": ";
    o += mps ? (std::strcmp(mps, "1") == 0 ? "true" : "false") : "null";
    o += ", \"mps_active_thread_percentage\": " + (pct ? json_str(pct) : std::string("null"));
    o += ", \"mps_pipe_directory\": ";
    const char *pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    o += pipe ? json_str(pipe) : "null";
    o += ", \"vmmipc_sync\": ";
    const char *sync = std::getenv("VMMIPC_SYNC");
    o += sync ? json_str(sync) : "null";
    o += ", \"config\": {";
    for (size_t i = 0; i < config_.size(); i++)
      o += (i ? ", " : "") + json_str(config_[i].first) + ": " + config_[i].second;
    o += "}, \"unit\": \"seconds per operation\", \"rows\": [";
    for (size_t i = 0; i < rows_.size(); i++) {
      const Row &r = rows_[i];
      o += std::string(i ? ",\n  " : "\n  ") + "{\"name\": " + json_str(r.name) + ", \"what\": " + json_str(r.what) +
           ", \"path\": " + json_str(r.path);
      if (r.bytes >= 0) o += ", \"bytes\": " + std::to_string(r.bytes);
      if (!r.skipped.empty()) {
        o += ", \"skipped\": " + json_str(r.skipped) + "}";
        continue;
      }
      Stats s = stats(r.samples);
      o += ", \"iters\": " + std::to_string(r.iters) + ", \"reps\": " + std::to_string(r.samples.size()) +
           ", \"stats\": {\"median\": " + json_num(s.median) + ", \"p10\": " + json_num(s.p10) +
           ", \"p90\": " + json_num(s.p90) + ", \"min\": " + json_num(s.min) + ", \"max\": " + json_num(s.max) +
           "}, \"samples\": [";
      for (size_t k = 0; k < r.samples.size(); k++) o += (k ? ", " : "") + json_num(r.samples[k]);
      o += "], \"data\": " + json_str(data_str(r.data)) + ", \"mismatches\": " + std::to_string(r.mismatches);
      if (!r.note.empty()) o += ", \"note\": " + json_str(r.note);
      o += "}";
    }
    o += "\n]}\n";
    std::fputs(o.c_str(), f);
    std::fclose(f);
  }

  std::string bench_;
  Args args_;
  int rank_ = 0, size_ = 0, driver_ = 0;
  std::vector<std::string> names_, uuids_;
  std::vector<std::pair<std::string, std::string>> config_;
  std::vector<Row> rows_;
};

} // namespace devbench

#endif
