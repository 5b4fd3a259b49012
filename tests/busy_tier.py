"""The busy tier's cases (issue 31), shared by the cli, python and multinode conftests.

A case marked `busy` (failure detection, failover, a store's life cycle) runs once, in the busy
tier beside a CPU hog on every core (ctest -L busy, tests/busy/with_cpu_hog.sh), where it is
hardest to pass. The plain Release run of its file skips it, visibly, when ctest sets
DDSTAGE_BUSY_CASES=busy-tier: running it there too would add minutes to the suite and nothing
the busy run does not check. The ASan tree does not set it, so there these cases run under
the sanitizers as well; `pytest` by hand runs everything."""
import os

import pytest

ENV = "DDSTAGE_BUSY_CASES"
MARKER_HELP = ("busy: failure detection, failover or a store's life cycle: time-outs and bounds that must hold "
               "with every core busy (ctest -L busy runs them beside a CPU hog)")


def configure(config):
    config.addinivalue_line("markers", MARKER_HELP)


def skip_busy_cases(items):
    if os.environ.get(ENV) != "busy-tier":
        return
    skip = pytest.mark.skip(reason="runs in the busy tier, beside a CPU hog (ctest -L busy)")
    for item in items:
        if item.get_closest_marker("busy"):
            item.add_marker(skip)
