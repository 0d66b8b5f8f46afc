// gtest main for MPI suites: initialises MPI, prefixes every rank's failures
// with its rank, runs a watchdog, and fails the process if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace {

int g_rank = 0;

// Prints failures (with the rank) and the per-test verdict for ranks != 0,
// which do not use gtest's default printer.
class RankPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankPrinter(bool verbose) : verbose_(verbose) {}
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", g_rank, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo &info) override {
    if (verbose_ || info.result()->Failed())
      std::fprintf(stderr, "[rank %d] %s %s.%s\n", g_rank, info.result()->Failed() ? "FAILED" : "ok",
                   info.test_suite_name(), info.name());
  }

 private:
  bool verbose_;
};

// Aborts the process when one test runs longer than the limit, naming it, so
// that a hang becomes a failure with a name instead of a ctest timeout.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(int seconds) : seconds_(seconds), thread_([this] { Run(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const ::testing::TestInfo &info) override {
    std::lock_guard<std::mutex> g(mu_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(seconds_);
    armed_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo &) override {
    std::lock_guard<std::mutex> g(mu_);
    armed_ = false;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> g(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(g);
        continue;
      }
      if (cv_.wait_until(g, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr, "[rank %d] watchdog: %s ran longer than %d s; aborting\n", g_rank, name_.c_str(),
                     seconds_);
        std::fflush(stderr);
        std::abort();
      }
    }
  }
  int seconds_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace

int main(int argc, char **argv) {
  int provided = 0;
  // MULTIPLE: the thread tests run calls on two comms at once.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  ::testing::InitGoogleTest(&argc, argv);

  auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (g_rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankPrinter(std::getenv("VMMIPC_TEST_VERBOSE") != nullptr));
  const char *wd = std::getenv("VMMIPC_TEST_WATCHDOG_S");
  listeners.Append(new Watchdog(wd ? std::atoi(wd) : 150));

  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0 && any) {
    // On the stand-in a failure may depend on when stream work completed.
    const char *driver = std::getenv("VMMIPC_CUDA_DRIVER"), *async = std::getenv("VMMIPC_STANDIN_ASYNC");
    std::string replay;
    if (driver && std::strstr(driver, "standin"))
      replay = std::string(" (stand-in stream work: VMMIPC_STANDIN_ASYNC=") + (async ? async : "random:0") + ")";
    std::fprintf(stderr, "some rank failed; see the [rank N] lines above%s\n", replay.c_str());
  }
  MPI_Finalize();
  return any;
}
