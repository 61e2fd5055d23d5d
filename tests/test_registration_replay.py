"""A replayed RegisterJob gives the job's token only to the credential that registered the job.

Before (issue 33): replaying ``RegisterJob(job_id, hosts, tenant, request_id)`` from any caller
(open registration on loopback, or a second launcher whose host globs overlap) returned the
victim's token, and the replayer withdrew the victim's intents. Now a replay from another
credential is ALREADY_EXISTS. With registration tokens the credential is the token used; with
open registration on loopback it is the operating-system user owning the caller's socket
(docs/api.md, "Who may replay a registration").
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from service_cases import ADMIN_TOKEN, serving, spread_fabric

from c4p.client import ApiError, FlowIntentClient, communicator

FABRIC = spread_fabric()
HOSTS = [h.name for h in FABRIC.hosts]
LAUNCHER = "launcher-token-0123456789abcdef"
OTHER = "other-launcher-token-0123456789ab"
ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def test_a_replay_from_another_launcher_is_already_exists(tmp_path: Path) -> None:
    auth = {
        "admin": [{"value": ADMIN_TOKEN}],
        "registration": [{"value": LAUNCHER}, {"value": OTHER, "hosts": HOSTS[:3]}],
    }
    with (
        serving(FABRIC, tmp_path, auth=auth) as service,
        FlowIntentClient(service.address, register_token=LAUNCHER, attempts=1) as mine,
        FlowIntentClient(service.address, register_token=OTHER, attempts=1) as theirs,
        FlowIntentClient(service.address, register_token=ADMIN_TOKEN, attempts=1) as admin,
    ):
        job = mine.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
        job.submit([communicator("dp")])
        for thief in (theirs, admin):
            with pytest.raises(ApiError) as caught:
                thief.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
            assert caught.value.code == grpc.StatusCode.ALREADY_EXISTS, caught.value
            assert job.token not in caught.value.details
        again = mine.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
        assert again.token == job.token  # a retry of a lost answer still gets it


def _reachable_by(uid: int, path: Path) -> bool:
    """Whether every directory down to ``path`` lets others through (a 0700 parent does not)."""
    for parent in [*reversed(path.parents), path]:
        mode = parent.stat()
        if mode.st_uid != uid and not mode.st_mode & stat.S_IXOTH:
            return False
    return True


REPLAY = """
import sys
from c4p.client import ApiError, FlowIntentClient
with FlowIntentClient(sys.argv[1], attempts=1) as flow:
    try:
        job = flow.register_job("victim", hosts=sys.argv[2:4], tenant="t", request_id="r-1")
    except ApiError as exc:
        print(exc.code.name)
    else:
        print("TOKEN", job.token)
"""


def test_open_registration_replays_only_to_the_same_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a replaying client as another user (uid 65534)")
    python = Path("/usr/bin/python3")
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    packages = site / "site-packages"
    if not python.exists() or not _reachable_by(NOBODY, ROOT) or not packages.is_dir():
        pytest.skip("uid 65534 cannot reach the checkout or /usr/bin/python3 (a 0700 parent?)")
    with (
        serving(FABRIC, tmp_path) as service,
        FlowIntentClient(service.address, attempts=1) as mine,
    ):
        job = mine.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
        again = mine.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
        assert again.token == job.token  # the same user: a retry
        done = subprocess.run(
            [str(python), "-c", REPLAY, service.address, *HOSTS[:2]],
            cwd="/",
            env={"PYTHONPATH": f"{ROOT}:{packages}", "PATH": "/usr/bin:/bin"},
            user=NOBODY,
            group=NOBODY,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "ALREADY_EXISTS", done.stdout
