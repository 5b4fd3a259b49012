"""What every test that starts MPI jobs shares (CLI and Python tests alike): the OpenMPI
environment, and telling whether a rank's process still runs."""

from pathlib import Path

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    # Everything stays on this machine: shared memory between ranks, loopback for the runtime.
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}


def pid_alive(pid):
    """Running, not a zombie (this container's PID 1 may never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"
