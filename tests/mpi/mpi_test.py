#!/usr/bin/python3
"""End-to-end tests of `fanstore serve` (the MPI daemon) on one machine: 4 ranks, one local directory each
(and, for --case netns, one network namespace each, Open MPI over TCP between them).

Each --case starts its own `mpirun --oversubscribe -np N fanstore serve`, generates its data with a fixed seed
in a temporary directory, and removes everything at the end. Exit 0 pass, 1 fail, 77 skipped (printed loudly).
Kill-one-daemon runs under `--mca orte_abort_on_non_zero_status 0` (without it Open MPI 4.1's mpirun aborts
the whole job when a rank dies). The cases live in cases_*.py; the harness in mpi_harness.py.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases_basic  # noqa: E402
import cases_cleanup  # noqa: E402
import cases_env  # noqa: E402
import cases_faults  # noqa: E402
import cases_mount  # noqa: E402
import cases_netns  # noqa: E402
import cases_prefetch  # noqa: E402
import cases_security  # noqa: E402
import cases_staging  # noqa: E402
from mpi_harness import SKIP, Ctx, Fail, Skip, log  # noqa: E402

CASES = {
    "read_all": cases_basic.case_read_all,
    "no_doorbell": cases_basic.case_no_doorbell,
    "replicas": cases_basic.case_replicas,
    "nospace": cases_basic.case_nospace,
    "python": cases_basic.case_python,
    "client_fds": cases_basic.case_client_fds,
    "coalesce": cases_basic.case_coalesce,
    "chunked": cases_basic.case_chunked,
    "transport_options": cases_basic.case_transport_options,
    "environment": cases_env.case_environment,
    "mount": cases_mount.case_mount,
    "fault": cases_faults.case_fault,
    "dead_peer": cases_faults.case_dead_peer,
    "rogue_peer": cases_faults.case_rogue_peer,
    "kill_stress": cases_faults.case_kill_stress,
    "security": cases_security.case_security,
    "lock": cases_security.case_lock,
    "limits": cases_security.case_limits,
    "no_memory": cases_security.case_no_memory,
    "hostile_range": cases_security.case_hostile_range,
    "prefetch": cases_prefetch.case_prefetch,
    "prefetch_limits": cases_prefetch.case_prefetch_limits,
    "netns": cases_netns.case_netns,
    "cleanup": cases_cleanup.case_cleanup,
    "startup_signal": cases_cleanup.case_startup_signal,
    "staging_once": cases_staging.case_staging_once,
    "staging_serve_early": cases_staging.case_staging_serve_early,
    "staging_hurry": cases_staging.case_staging_hurry,
    "staging_kill": cases_staging.case_staging_kill,
    "staging_corrupt": cases_staging.case_staging_corrupt,
    "staging_failure": cases_staging.case_staging_failure,
    "staging_readers": cases_staging.case_staging_readers,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--fanstore", required=True)
    ap.add_argument("--check", required=True, help="the daemon_check test client")
    ap.add_argument("--rogue", default="", help="transport_rogue_test (rogue_peer case)")
    ap.add_argument("--preload", default="", help="libfanstore_preload.so (python cases)")
    ap.add_argument("--python", default=os.environ.get("FANSTORE_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--train", default="", help="fanstore-train (prefetch case: its epoch hint)")
    ap.add_argument("--runs", type=int, default=25, help="kill_stress: how many jobs to kill a rank in")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        print("*** SKIPPED: mpirun not found on PATH: the MPI daemon tests did not run ***", flush=True)
        return SKIP
    work = tempfile.mkdtemp(prefix="fanstore-mpi-")
    ctx = Ctx(args, work)
    t0 = time.time()
    try:
        rc = CASES[args.case](ctx) or 0
        if rc == SKIP:
            print(f"*** SKIPPED: mpi case {args.case} ***", flush=True)
        else:
            log(f"PASS {args.case} in {time.time() - t0:.1f} s")
        return rc
    except Skip as e:
        print(f"*** SKIPPED: mpi case {args.case}: {e} ***", flush=True)
        return SKIP
    except Fail as e:
        log(f"FAIL {args.case}: {e}")
        return 1
    finally:
        ctx.kill_all()
        for cleanup in getattr(ctx, "cleanups", []):
            cleanup()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
