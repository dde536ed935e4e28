// The environment variables of the scripts and the tests (test plumbing included): the rest of env.hpp's table, kept
// out of the installed headers. README.md's tables are generated from both (tests/meta/env_table.cpp).
#pragma once

#include <cstdlib>

#include "fanstore/env.hpp"

namespace fanstore::env {

// X(identifier, "NAME", scope, "read by", "meaning", "default"), as in env.hpp; scope kScript or kTest.
// (one row per variable, aligned as a table: clang-format leaves it alone)
// clang-format off
#define FANSTORE_TOOLING_ENV_VARIABLES(X)                                                                                   \
  X(kPython, "FANSTORE_PYTHON", Scope::kScript, "scripts, tests, benchmarks",                                               \
    "the Python (with numpy, h5py, PIL, torch) that every script and test runs", "`/usr/bin/python3`")                      \
  X(kBuildDir, "BUILD_DIR", Scope::kScript, "`scripts/build.sh`, `test.sh`, `demo.sh`, `bench.sh`",                         \
    "build directory", "`build`")                                                                                           \
  X(kBuildType, "BUILD_TYPE", Scope::kScript, "`scripts/build.sh`", "CMake build type", "`RelWithDebInfo`")                 \
  X(kJobs, "JOBS", Scope::kScript, "`scripts/build.sh`, `scripts/bench/build_drivers.sh`", "parallel compile jobs",         \
    "all cores (`build.sh`), 2 (`build_drivers.sh`)")                                                                       \
  X(kCtestJobs, "CTEST_JOBS", Scope::kScript, "`scripts/test.sh`", "tests run in parallel", "2")                            \
  X(kSlowTests, "FANSTORE_SLOW_TESTS", Scope::kScript, "`scripts/test.sh`",                                                 \
    "`1`: also run the tests labelled `slow` or `long` (e.g. `mpi_kill_stress_25`, `bench.quick`)", "off")                  \
  X(kDemoDir, "DEMO_DIR", Scope::kScript, "`scripts/demo.sh`", "where the demo writes its data, images and runs",           \
    "a new `/tmp/fanstore-demo.*`")                                                                                         \
  X(kBenchTmpfs, "BENCH_TMPFS", Scope::kScript, "`scripts/bench.sh`", "tmpfs directory for the benchmark trees",            \
    "`/dev/shm/fanstore-bench`")                                                                                            \
  X(kBenchDisk, "BENCH_DISK", Scope::kScript, "`scripts/bench.sh`",                                                         \
    "directory on a real disk (not tmpfs) for the disk baselines", "`/var/tmp/fanstore-bench`")                             \
  X(kBenchStageNodeRate, "STAGE_NODE_RATE", Scope::kScript, "`scripts/bench/staging.sh`",                                   \
    "`tc` rate of each namespace node's link", "`1gbit`")                                                                   \
  X(kBenchStageFsRate, "STAGE_FS_RATE", Scope::kScript, "`scripts/bench/staging.sh`",                                       \
    "`tc` rate of the sshfs file server's link", "`400mbit`")                                                               \
  X(kBenchCostRounds, "COST_ROUNDS", Scope::kScript, "`scripts/bench/remote_cost.sh`",                                     \
    "rounds of every variant (the table shows their median)", "3 (1 with `--quick`)")                                      \
  X(kBenchCostAlt, "COST_ALT", Scope::kScript, "`scripts/bench/remote_cost.sh`",                                            \
    "another build's `fanstore`, measured as one more column (an A/B across commits)", "none")                             \
  X(kBenchCostOnly, "COST_ONLY", Scope::kScript, "`scripts/bench/remote_cost.sh`",                                          \
    "the variants to run, by name (`default`, `no-doorbell`, `no-mapped`, `alt`)", "all")                                  \
  X(kBenchIobench, "IOBENCH", Scope::kScript, "`scripts/bench/remote_cost.sh`",                                             \
    "the fanstore-iobench to run (bench.sh passes the one it found or built)", "`$BUILD_DIR/bin/fanstore-iobench`")       \
  X(kBenchDrivers, "BENCH_DRIVERS", Scope::kScript, "`scripts/bench.sh`",                                                   \
    "where the benchmark drivers are built when the build directory lacks them (kept between runs)",                        \
    "`/var/tmp/fanstore-bench-drivers`")                                                                                    \
  X(kBenchSkip, "BENCH_SKIP", Scope::kScript, "`scripts/bench.sh`",                                                        \
    "sections with a script of their own not to run (`spatial`, `remote-cost`, `staging`, `env`, `ltfb`)", "none")       \
  X(kBenchStepTimeout, "BENCH_STEP_TIMEOUT", Scope::kScript, "`scripts/bench.sh`, `trainer.sh`",                                       \
    "seconds one benchmark step may run before it is reported as timed out", "300")                                         \
  X(kBenchMpirun, "MPIRUN", Scope::kScript, "`scripts/bench/spatial.sh`, `ltfb.sh`",                                        \
    "the `mpirun` that launches the grid and tournament runs", "`mpirun` on `PATH`")                                        \
  X(kBenchSpatialParts, "SPATIAL_PARTS", Scope::kScript, "`scripts/bench/spatial.sh`",                                      \
    "which parts to run (rerun the timing parts alone at a quiet moment)", "`memory cap scaling model`")                    \
  X(kComputeSanitizer, "COMPUTE_SANITIZER", Scope::kScript, "`scripts/gpu-smoke.sh --sanitizer`, `scripts/gpu-check.sh`",   \
    "the `compute-sanitizer` binary", "`compute-sanitizer` on `PATH`, else `/usr/local/cuda/bin/compute-sanitizer`")        \
  X(kCudaHome, "CUDA_HOME", Scope::kScript, "the bundle's `bin/fanstore-env`",                                              \
    "a CUDA toolkit whose `lib64` (searched first) holds the CUDA libraries", "unset")                                      \
  X(kEnvPythons, "FANSTORE_ENV_PYTHONS", Scope::kScript, "the bundle's `bin/fanstore-env`",                                 \
    "the Python programs whose `nvidia/*/lib` folders are searched for the CUDA libraries", "`python3` on `PATH`")          \
  X(kEnvSystemDirs, "FANSTORE_ENV_SYSTEM_DIRS", Scope::kScript, "the bundle's `bin/fanstore-env`",                          \
    "the folders searched last for the CUDA libraries (space-separated)",                                                   \
    "`/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/lib64`")                \
  X(kFanstoreBinary, "FANSTORE", Scope::kScript, "`scripts/mpirun-example.sh`, `scripts/slurm/fanstore.sbatch`",            \
    "the `fanstore` binary to launch",                                                                                      \
    "`mpirun-example.sh`: its bundle's `bin/fanstore`, else `build/bin/fanstore`, else `fanstore` on `PATH`; the sbatch "   \
    "script: `fanstore` on `PATH`")                                                                                         \
  X(kServeTimeout, "FANSTORE_TIMEOUT", Scope::kScript, "`scripts/mpirun-example.sh`, `scripts/slurm/fanstore.sbatch`",      \
    "`fanstore serve --timeout`: seconds before a remote read fails with EIO", "5")                                         \
  X(kStageTimeout, "FANSTORE_STAGE_TIMEOUT", Scope::kScript, "`scripts/mpirun-example.sh`",                                 \
    "seconds to wait for every node's daemon to serve (with `--strict-staging` in the options: to stage)", "3600")          \
  X(kProcessesPerNode, "FANSTORE_PPN", Scope::kScript, "`scripts/mpirun-example.sh`", "job processes per node", "1")        \
  X(kAbortOnDeath, "FANSTORE_ABORT_ON_DEATH", Scope::kScript, "`scripts/mpirun-example.sh`",                                \
    "`1`: mpirun ends every daemon when one dies (default: the survivors keep serving)", "0")                               \
  X(kServeOptions, "FANSTORE_SERVE_OPTIONS", Scope::kScript, "`scripts/mpirun-example.sh`",                                 \
    "extra `fanstore serve` options (e.g. `--cache-bytes 4G`)", "empty")                                                    \
  X(kBenchDaemonLaunch, "DAEMON_LAUNCH", Scope::kScript, "`scripts/bench/start_daemons.sh`",                                \
    "launcher (a bash array) replacing `mpirun -np 4`, e.g. mpirun across network namespaces", "`mpirun -np 4`")            \
  X(kSlurmImage, "IMAGE", Scope::kScript, "`scripts/slurm/fanstore.sbatch`", "image directory on the shared file system",   \
    "`/shared/imagenet.fst`")                                                                                               \
  X(kSlurmLocal, "LOCAL", Scope::kScript, "`scripts/slurm/fanstore.sbatch`",                                                \
    "node-local staging directory (`{node}` = Slurm's node name)", "`/tmp/fanstore-$SLURM_JOB_ID-{node}`")                  \
  X(kSlurmSocket, "SOCKET", Scope::kScript, "`scripts/slurm/fanstore.sbatch`", "each node's daemon socket",                 \
    "`$LOCAL/fanstore.sock`")                                                                                               \
  X(kSlurmMount, "MOUNT", Scope::kScript, "`scripts/slurm/fanstore.sbatch`", "where the job sees the image", "`/fanstore`") \
  X(kSlurmSrunMpi, "SRUN_MPI", Scope::kScript, "`scripts/slurm/fanstore.sbatch`",                                           \
    "`srun --mpi=` for the daemons and the command; empty: the site's MpiDefault", "`pmix`")                                \
  X(kSlurmStageTimeout, "STAGE_TIMEOUT", Scope::kScript, "`scripts/slurm/fanstore.sbatch`",                                 \
    "seconds allowed until every node serves (with `--strict-staging`: has staged)", "3600")                                \
  X(kSlurmServeOptions, "SERVE_OPTIONS", Scope::kScript, "`scripts/slurm/fanstore.sbatch`",                                 \
    "more `fanstore serve` options, e.g. `--replicas 2`", "none")                                                           \
  X(kSlurmRunOptions, "RUN_OPTIONS", Scope::kScript, "`scripts/slurm/fanstore.sbatch`",                                     \
    "more `fanstore run` options, e.g. `--stats`", "none")                                                                  \
  X(kSlurmJobSrunOptions, "JOB_SRUN_OPTIONS", Scope::kScript, "`scripts/slurm/fanstore.sbatch`",                            \
    "more `srun` options for the command, e.g. `--gpus-per-task=1`", "none")                                                \
  X(kFuzzArtifacts, "FANSTORE_FUZZ_ARTIFACTS", Scope::kTest, "`tests/core/fuzz/run_fuzz.sh`, `scripts/fuzz.sh`",            \
    "where a crashing fuzz input is saved", "`$TMPDIR` or `/tmp`")                                                          \
  X(kTestKeep, "FANSTORE_TEST_KEEP", Scope::kTest, "`fuse_test`", "non-empty: keep the test's temporary tree", "unset")     \
  X(kTestBinDir, "FANSTORE_BIN_DIR", Scope::kTest, "`tests/trainer_train/train_tests.sh`",                                  \
    "directory of `fanstore`, `fanstore-train`, `fanstore-datagen`", "set by ctest")                                        \
  X(kTestMpirun, "FANSTORE_MPIRUN", Scope::kTest, "`tests/trainer_train/train_tests.sh`", "the `mpirun` to use",            \
    "set by ctest; else `mpirun` on `PATH`")                                                                                \
  X(kTestTrainDir, "FANSTORE_TRAIN_TESTS_DIR", Scope::kTest, "`tests/trainer_train/train_tests.sh`",                        \
    "the folder of its helper scripts", "the script's folder")                                                              \
  X(kTestFsio, "FSIO", Scope::kTest, "`tests/integration/realprograms.sh`",                                                 \
    "the `fsio` harness; adds the fd-semantics checks", "unset: checks skipped")                                            \
  X(kTestSkipTorch, "SKIP_TORCH", Scope::kTest, "`tests/integration/realprograms.sh`", "`1`: skip the torchvision check",   \
    "off")                                                                                                                  \
  X(kTestSkipTorchRaw, "SKIP_TORCH_RAW", Scope::kTest, "`tests/integration/run_preload.sh`",                                \
    "`1`: skip the torchvision check on the raw image", "off")                                                              \
  X(kTestLazyExpect, "LAZY_EXPECT", Scope::kTest, "`lazy_fd_test`",                                                         \
    "`0`: the run has `FANSTORE_LAZY=0`, so fds are memfds at open", "lazy")                                                \
  X(kTestCorruptPiece, "FANSTORE_TEST_CORRUPT_PIECE", Scope::kTest, "`fanstore serve`",                                     \
    "N: damage the N-th staging piece each daemon receives (0-based), to test that it is refused and fetched again",        \
    "unset")
// clang-format on

FANSTORE_TOOLING_ENV_VARIABLES(FANSTORE_ENV_NAME_CONSTANT)  // the row macros of env.hpp
inline constexpr Variable kToolingVariables[] = {FANSTORE_TOOLING_ENV_VARIABLES(FANSTORE_ENV_TABLE_ROW)};

inline constexpr const char* kDefaultPython = "/usr/bin/python3";

// FANSTORE_PYTHON when set and non-empty, else /usr/bin/python3 (for tests and tools that run Python).
inline const char* PythonInterpreter() {
  const char* p = std::getenv(kPython);
  return (p != nullptr && *p != '\0') ? p : kDefaultPython;
}

}  // namespace fanstore::env
