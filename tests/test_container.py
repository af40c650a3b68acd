"""container.py (Docker or Podman) and the container launcher's pieces (engines/containerized.py) that need
no engine: the listening-socket check (real sockets of this process), the containers.conf Podman gets, the
engine choice."""

from __future__ import annotations

import os
import resource
import socket

import pytest

from soarlab.container import podman_conf, probe
from soarlab.engines.containerized import listening
from soarlab.errors import SoarError


def own_sockets() -> set[tuple[str, int]]:
    """What this process listens on, read as check_binds reads a container's processes."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    tables = "".join(open(f"/proc/self/net/{table}").read() for table in ("tcp", "tcp6"))
    return listening(targets, tables)


def test_listening_sees_this_process_sockets_and_their_addresses():
    with socket.socket() as loop, socket.socket() as anywhere, socket.socket(socket.AF_INET6) as v6, socket.socket() as idle:
        loop.bind(("127.0.0.1", 0))
        loop.listen()
        anywhere.bind(("0.0.0.0", 0))
        anywhere.listen()
        v6.bind(("::", 0))
        v6.listen()
        idle.bind(("127.0.0.1", 0))  # bound, not listening: not a server
        found = own_sockets()
        assert ("127.0.0.1", loop.getsockname()[1]) in found
        assert ("0.0.0.0", anywhere.getsockname()[1]) in found
        assert ("::", v6.getsockname()[1]) in found
        assert all(port != idle.getsockname()[1] for _, port in found)
        closed = loop.getsockname()
    assert closed not in own_sockets()


def test_podman_conf_limits_are_this_hosts_hard_limits(tmp_path):
    text = podman_conf(tmp_path).read_text()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert f'"nofile={nofile}:{nofile}"' in text
    nproc = int(text.split('"nproc=')[1].split(":")[0])
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    assert nproc <= pid_max and (nproc <= resource.getrlimit(resource.RLIMIT_NPROC)[1] or
                                 resource.getrlimit(resource.RLIMIT_NPROC)[1] == resource.RLIM_INFINITY)


def test_container_cli_choice_is_checked():
    with pytest.raises(SoarError, match="is not auto, docker or podman"):
        probe("kubernetes")
