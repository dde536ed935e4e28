// StopSignals (docs/training.md, "Stopping a run"): the stop signals set a flag and never interrupt a thread that
// computes, a signal ignored at start stays ignored, and a second SIGINT kills at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "train/stop_signals.hpp"

namespace fanstore::trainer {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};

// Waits up to 5 s for a stop signal to be caught.
int wait_caught() {
  for (int i = 0; i < 500 && StopSignals::caught() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return StopSignals::caught();
}

bool blocked_here(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

TEST(StopSignals, ThreadsStartedMeanwhileBlockThemAndTheMaskComesBack) {
  for (int sig : kStopSignals) ASSERT_FALSE(blocked_here(sig));
  {
    const StopSignals stop(false);
    bool all_blocked = true;
    std::thread([&] {
      for (int sig : kStopSignals) all_blocked = all_blocked && blocked_here(sig);
    }).join();
    EXPECT_TRUE(all_blocked) << "a thread that computes (oneDNN's, the loader's) must never take a stop signal";
    for (int sig : kStopSignals) EXPECT_TRUE(blocked_here(sig));
  }
  for (int sig : kStopSignals) EXPECT_FALSE(blocked_here(sig)) << strsignal(sig) << " stays blocked after the run";
}

TEST(StopSignals, ManySignalsToTheProcessSetTheFirstOnlyAndTheProcessGoesOn) {
  const StopSignals stop(false);
  EXPECT_EQ(StopSignals::caught(), 0);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(kill(getpid(), i == 0 ? SIGUSR1 : SIGTERM), 0);
  EXPECT_EQ(wait_caught(), SIGUSR1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(StopSignals::caught(), SIGUSR1) << "a later signal must not replace the first";
}

TEST(StopSignals, ASignalIgnoredAtTheStartStaysIgnored) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGUSR1, &ignore, &old), 0);
  {
    const StopSignals stop(false);
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(StopSignals::caught(), 0);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  ASSERT_EQ(sigaction(SIGUSR1, &old, nullptr), 0);
}

TEST(StopSignals, ASecondSigintKillsAtOnce) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const StopSignals stop(false);
    kill(getpid(), SIGINT);
    if (wait_caught() != SIGINT) _exit(2);
    kill(getpid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(3);  // still alive: the second SIGINT did nothing
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited " << WEXITSTATUS(status) << " (2: first SIGINT not caught)";
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

}  // namespace
}  // namespace fanstore::trainer
