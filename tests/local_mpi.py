"""What every test that starts MPI jobs shares (CLI and Python tests alike): the OpenMPI
environment, and telling whether a rank's process still runs."""

import atexit
import shutil
import tempfile
from pathlib import Path

# OpenMPI's shared memory between ranks (vader segments) goes to a directory of this test
# process's own: the jobs the tests SIGKILL leave their segments there, and removing the
# directory at exit never touches another test's live job (ctest runs test files side by side).
VADER_DIR = Path(tempfile.mkdtemp(prefix="ompi-vader-", dir="/dev/shm"))
atexit.register(shutil.rmtree, VADER_DIR, True)

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    # Everything stays on this machine: shared memory between ranks, loopback for the runtime.
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_oob_tcp_if_include": "lo",
    # pml ob1 over those BTLs: the default pml cm loads libpsm2/libinfinipath in every rank, whose
    # constructors sleep 0.2-3 s calibrating a clock, for hardware these tests never use.
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl_vader_backing_directory": str(VADER_DIR),
}


def pid_alive(pid):
    """Running, not a zombie (this container's PID 1 may never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"
