// Test client for daemon mode: reads files through Client::FromEnv (FANSTORE_DAEMON) and compares them with
// the source tree byte for byte; prints one summary line. Used by the MPI tests (tests/mpi/mpi_test.py).
#include <errno.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/client.hpp"

namespace {

std::string Slurp(const std::string& path, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  *ok = static_cast<bool>(f);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Read an image's files through the node's fanstore daemon and compare them with the source"};
  std::string src;
  std::string which = "all";
  int threads = 1;
  bool remote_fail = false;
  double max_seconds = 0;
  int owner_rank = -1, nranks = 0, repeat = 1;
  bool tolerate_eio = false;
  std::string wait_file;
  app.add_option("--src", src, "Source tree the image was packed from")->required();
  app.add_option("--which", which, "Files to read: all, local, remote")->capture_default_str();
  app.add_option("--threads", threads, "Reader threads")->capture_default_str();
  app.add_flag("--remote-fail", remote_fail, "Remote reads must fail with EIO (none may hang); local ones must work");
  app.add_option("--owner-rank", owner_rank, "Only files of regular partitions p with p % nranks == this");
  app.add_option("--nranks", nranks, "Number of daemon ranks (with --owner-rank)");
  app.add_option("--wait-file", wait_file,
                 "Read one selected remote file, then wait until this file exists before reading the rest");
  app.add_option("--max-seconds", max_seconds, "Fail when one read takes longer than this (0: no limit)");
  app.add_option("--repeat", repeat, "Read the selection this many times (load for fault tests)")
      ->capture_default_str();
  app.add_flag("--tolerate-eio", tolerate_eio, "EIO on a remote read is not a failure (load while a peer dies)");
  CLI11_PARSE(app, argc, argv);

  auto client = fanstore::Client::FromEnv();
  if (!client.ok()) {
    std::fprintf(stderr, "daemon_check: %s\n", client.status().ToString().c_str());
    return 2;
  }
  fanstore::Client& c = **client;
  const fanstore::Image& img = c.image();
  const uint32_t rep = img.Summary().replicated_part;
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < img.size(); ++id) {
    fanstore::Entry e = img.Get(id);
    if (!e.is_reg() || e.size == 0) continue;
    bool local = img.HasPartition(e.part);
    if ((which == "local" && !local) || (which == "remote" && local)) continue;
    if (owner_rank >= 0 && (e.part == rep || nranks <= 0 || static_cast<int>(e.part % nranks) != owner_rank)) continue;
    ids.push_back(id);
  }
  if (!wait_file.empty()) {
    // Establishes this process's daemon connection before the test breaks something.
    for (uint32_t id : ids)
      if (!img.HasPartition(img.Get(id).part)) {
        auto r = c.Load(id);
        std::printf("daemon_check: warm-up read of %s: %s\n", std::string(img.Get(id).path).c_str(),
                    r.ok() ? "ok" : r.status().ToString().c_str());
        break;
      }
    std::fflush(stdout);
    while (access(wait_file.c_str(), F_OK) != 0) usleep(20000);
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> ok{0}, mismatch{0}, eio{0}, other{0}, slow{0}, local_n{0}, remote_n{0};
  std::atomic<uint64_t> worst_us{0};
  std::mutex out_mu;
  const size_t total = ids.size() * static_cast<size_t>(repeat > 0 ? repeat : 1);
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < total;) {
      size_t i = k % ids.size();
      fanstore::Entry e = img.Get(ids[i]);
      (img.HasPartition(e.part) ? local_n : remote_n).fetch_add(1);
      auto t0 = std::chrono::steady_clock::now();
      auto r = c.Load(e.id);
      uint64_t us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
      for (uint64_t w = worst_us.load(); us > w && !worst_us.compare_exchange_weak(w, us);) {
      }
      if (max_seconds > 0 && us > max_seconds * 1e6) slow.fetch_add(1);
      if (!r.ok()) {
        bool local = img.HasPartition(e.part);
        (fanstore::ToErrno(r.status()) == EIO && !local ? eio : other).fetch_add(1);
        if (!remote_fail && !tolerate_eio) {
          std::lock_guard<std::mutex> g(out_mu);
          std::fprintf(stderr, "daemon_check: %s: %s\n", std::string(e.path).c_str(), r.status().ToString().c_str());
        }
        continue;
      }
      bool have = false;
      std::string want = Slurp(src + "/" + std::string(e.path), &have);
      const fanstore::FileBytes& b = **r;
      if (!have || want.size() != b.size() || want.compare(0, want.size(), b.data(), b.size()) != 0) {
        mismatch.fetch_add(1);
        std::lock_guard<std::mutex> g(out_mu);
        std::fprintf(stderr, "daemon_check: %s: bytes differ from the source\n", std::string(e.path).c_str());
      } else {
        ok.fetch_add(1);
      }
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int i = 1; i < threads; ++i) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "daemon_check: %zu reads (%llu local, %llu remote): %llu ok, %llu mismatched, %llu EIO, %llu other errors, "
      "%llu slow; slowest read %.3f s; %.2f s total\n",
      total, (unsigned long long)local_n.load(), (unsigned long long)remote_n.load(), (unsigned long long)ok.load(),
      (unsigned long long)mismatch.load(), (unsigned long long)eio.load(), (unsigned long long)other.load(),
      (unsigned long long)slow.load(), worst_us.load() / 1e6, sec);
  if (ids.empty() || slow > 0 || mismatch > 0 || other > 0) return 1;
  if (remote_fail) return eio == remote_n && ok == local_n ? 0 : 1;
  if (tolerate_eio) return 0;
  return ok == total ? 0 : 1;
}
