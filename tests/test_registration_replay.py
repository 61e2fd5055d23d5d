"""A replayed RegisterJob gives the job's token only to the credential that registered the job.

Before (issue 33): replaying ``RegisterJob(job_id, hosts, tenant, request_id)`` from any caller
(open registration on loopback, or a second launcher whose host globs overlap) returned the
victim's token, and the replayer withdrew the victim's intents. Now a replay from another
credential is ALREADY_EXISTS. With registration tokens the credential is the token used; with
open registration on loopback it is the operating-system user owning the caller's socket
(docs/api.md, "Who may replay a registration").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from libc4p_cases import staged_for
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


MODULES = """
import json, sys
import c4p.client
loaded = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
print(json.dumps(sorted({f for f in loaded if f})))
"""


def stage_client(stage: Path) -> None:
    """Copy into ``stage`` every top-level package ``c4p.client`` loads from the checkout or
    the venv's site-packages, so another uid can import the client where the checkout sits under
    a 0700 parent (a clone in ``mktemp -d`` or ``/root``): which packages is asked of Python
    itself, not listed here by hand."""
    files = json.loads(
        subprocess.run(
            [sys.executable, "-c", MODULES], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout
    )
    roots = [ROOT, *(Path(p) for p in sys.path if p.endswith("site-packages"))]
    tops: set[Path] = set()
    for name in files:
        path = Path(name).resolve()
        for base in roots:
            if path.is_relative_to(base.resolve()):
                tops.add(base.resolve() / path.relative_to(base.resolve()).parts[0])
    for top in sorted(tops):
        if top.is_dir():
            shutil.copytree(top, stage / top.name, symlinks=True, ignore=IGNORED)
        else:
            shutil.copy2(top, stage / top.name)
    for tree in [stage, *(d for d in stage.rglob("*") if d.is_dir())]:
        os.chmod(tree, 0o755)


IGNORED = shutil.ignore_patterns("__pycache__", "tests")


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
    if not python.exists():
        pytest.skip("no /usr/bin/python3 for uid 65534 (the venv's Python may be unreachable)")
    version = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(
            f"/usr/bin/python3 is {version}; the venv's packages need {sys.version_info[:2]}"
        )
    with (
        staged_for(NOBODY) as stage,
        serving(FABRIC, tmp_path) as service,
        FlowIntentClient(service.address, attempts=1) as mine,
    ):
        stage_client(stage)
        job = mine.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
        again = mine.register_job("victim", hosts=HOSTS[:2], tenant="t", request_id="r-1")
        assert again.token == job.token  # the same user: a retry
        done = subprocess.run(
            [str(python), "-c", REPLAY, service.address, *HOSTS[:2]],
            cwd="/",
            env={"PYTHONPATH": str(stage), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
            user=NOBODY,
            group=NOBODY,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "ALREADY_EXISTS", done.stdout
