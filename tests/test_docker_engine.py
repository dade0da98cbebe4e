"""Docker engine tests through the ``docker`` Python SDK.

Everything is built FROM the offline base image ``lucepatch/base:busybox``
(made by ``tests/docker_base.sh`` from the host's static busybox), so no
registry is ever contacted and containers run with networking disabled.

Without a Docker engine the tests skip with a ``no-docker:`` reason -- except
under ``CI=true``, where Docker is part of the CI contract and its absence is a
test failure (tests/needs.py; ``.ci/skip_policy.py`` would reject a ``no-docker:`` skip too).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

import needs

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parent.parent
DOCKER_BASE_SH = REPO / "tests" / "docker_base.sh"
BASE_IMAGE = os.environ.get("LUCEPATCH_BASE_IMAGE", "lucepatch/base:busybox")
RUN_ID = uuid.uuid4().hex[:12]
TEST_LABEL = "org.lucepatch.test-run"


def _no_docker(why: str):
    """Skip (locally) or fail (CI=true) because Docker is unavailable."""
    needs.unavailable("no-docker:", why)


@pytest.fixture(scope="session")
def docker_client():
    client = needs.docker_client(timeout=120)
    yield client
    # best-effort cleanup of anything this run left behind
    for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={RUN_ID}"}):
        c.remove(force=True)
    for img in client.images.list(filters={"label": f"{TEST_LABEL}={RUN_ID}"}):
        try:
            client.images.remove(img.id, force=True)
        except Exception:
            pass
    client.close()


@pytest.fixture(scope="session")
def busybox_base(docker_client):
    """Make (idempotently) the offline busybox base image and return its tag."""
    if shutil.which("bash") is None:
        _no_docker("bash not found to run tests/docker_base.sh")
    proc = subprocess.run(
        ["bash", str(DOCKER_BASE_SH), BASE_IMAGE],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        msg = f"tests/docker_base.sh failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}"
        if "no static busybox" in proc.stderr:
            needs.unavailable("no-tool:", f"busybox (static) not found ({needs.INSTALL['busybox']}): {msg}")
        pytest.fail(msg, pytrace=False)
    image = docker_client.images.get(BASE_IMAGE)
    assert image.id == proc.stdout.strip().splitlines()[-1]
    return BASE_IMAGE


def _build(client, dockerfile: str, labels: dict[str, str] | None = None):
    tag = f"lucepatch-test/{RUN_ID}:{uuid.uuid4().hex[:8]}"
    all_labels = {TEST_LABEL: RUN_ID, **(labels or {})}
    image, logs = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()),
        tag=tag,
        labels=all_labels,
        network_mode="none",
        rm=True,
        forcerm=True,
    )
    return image, tag, list(logs)


def test_base_image_runs_offline(docker_client, busybox_base):
    image = docker_client.images.get(busybox_base)
    assert image.labels.get("org.lucepatch.base") == "busybox"
    out = docker_client.containers.run(
        busybox_base, ["sh", "-c", "echo hello from $(busybox | head -n1 | cut -d' ' -f1)"],
        remove=True, network_mode="none", labels={TEST_LABEL: RUN_ID},
    )
    assert out == b"hello from BusyBox\n"


def test_docker_base_script_is_idempotent(docker_client, busybox_base):
    before = docker_client.images.get(busybox_base).id
    proc = subprocess.run(["bash", str(DOCKER_BASE_SH), busybox_base],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "already exists" in proc.stderr
    assert proc.stdout.strip() == before
    assert docker_client.images.get(busybox_base).id == before


def test_build_from_dockerfile_string_with_labels(docker_client, busybox_base):
    dockerfile = (
        f"FROM {busybox_base}\n"
        "RUN echo built-by-sdk > /built.txt && mkdir -p /opt/lp && echo 42 > /opt/lp/answer\n"
        'LABEL org.lucepatch.from-dockerfile="yes" org.lucepatch.series="hami-core"\n'
        'CMD ["sh", "-c", "cat /built.txt /opt/lp/answer"]\n'
    )
    image, tag, logs = _build(docker_client, dockerfile, labels={"org.lucepatch.from-build-arg": "1"})
    try:
        assert any("Successfully built" in (chunk.get("stream") or "") for chunk in logs)
        labels = image.labels
        assert labels["org.lucepatch.from-dockerfile"] == "yes"
        assert labels["org.lucepatch.series"] == "hami-core"
        assert labels["org.lucepatch.from-build-arg"] == "1"
        assert labels["org.lucepatch.base"] == "busybox"  # inherited from the base
        assert tag in image.tags

        out = docker_client.containers.run(tag, remove=True, network_mode="none",
                                           labels={TEST_LABEL: RUN_ID})
        assert out == b"built-by-sdk\n42\n"
    finally:
        docker_client.images.remove(image.id, force=True)
    import docker  # noqa: PLC0415

    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)


def test_container_lifecycle_exit_code_and_logs(docker_client, busybox_base):
    name = f"lucepatch-test-{RUN_ID}-{uuid.uuid4().hex[:6]}"
    container = docker_client.containers.run(
        busybox_base, ["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"],
        name=name, detach=True, network_mode="none", labels={TEST_LABEL: RUN_ID},
    )
    try:
        result = container.wait(timeout=120)
        assert result["StatusCode"] == 3
        assert container.logs(stdout=True, stderr=False) == b"to-stdout\n"
        assert container.logs(stdout=False, stderr=True) == b"to-stderr\n"
        container.reload()
        assert container.status == "exited"
        assert container.labels[TEST_LABEL] == RUN_ID
    finally:
        container.remove(force=True)
    assert docker_client.containers.list(all=True, filters={"name": name}) == []


def test_network_none_has_no_network(docker_client, busybox_base):
    # NB: keep container output newline-terminated. dockerd 20.10 (Debian 12's
    # docker.io) intermittently drops a final partial line from the json-file
    # log (~5% of runs here), and containers.run() returns the logs.
    out = docker_client.containers.run(
        busybox_base, ["sh", "-c", "ls /sys/class/net; echo end"],
        remove=True, network_mode="none", labels={TEST_LABEL: RUN_ID},
    )
    assert out.decode().split() == ["lo", "end"]


def test_failed_build_raises_build_error(docker_client, busybox_base):
    import docker  # noqa: PLC0415

    with pytest.raises(docker.errors.BuildError) as excinfo:
        _build(docker_client, f"FROM {busybox_base}\nRUN echo about-to-fail && exit 7\n")
    assert "about-to-fail" in "".join(c.get("stream", "") for c in excinfo.value.build_log)
