"""Tests for the CI skip policy (.ci/skip_policy.py) and the shape of .ci/run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / ".ci" / "skip_policy.py"
CI_RUN = REPO / ".ci" / "run"
DOCKER_BASE_SH = REPO / "tests" / "docker_base.sh"


def fake_log(summary_lines: list[str], stats: str) -> str:
    body = "\n".join(summary_lines)
    return textwrap.dedent(
        """\
        ============================= test session starts ==============================
        platform linux -- Python 3.11.7, pytest-9.0.3, pluggy-1.6.0
        rootdir: /repo
        configfile: pyproject.toml
        testpaths: tests
        collected 9 items

        tests/test_a.py ..s.s                                                   [ 55%]
        tests/test_b.py .sss                                                    [100%]

        =========================== short test summary info ============================
        """
    ) + body + f"\n======================== {stats} ========================\n"


def run_policy(log: str, *args: str, ci: str | None = None, via_file: Path | None = None):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    cmd = [sys.executable, str(POLICY), *args]
    if via_file is not None:
        via_file.write_text(log)
        cmd.append(str(via_file))
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    return subprocess.run(cmd, input=log, capture_output=True, text=True, env=env, timeout=60)


ALLOWED = [
    "SKIPPED [2] tests/test_a.py:14: no-gpu: no NVIDIA driver (nvidia-smi not found)",
    "SKIPPED [1] tests/test_b.py:30: no-cluster: LUCEPATCH_KUBECONFIG not set",
    "SKIPPED [1] tests/test_b.py: no-upstream: LUCEPATCH_SRC_HAMI not set",
]


def test_allowed_skips_pass_under_ci():
    r = run_policy(fake_log(ALLOWED, "5 passed, 4 skipped in 0.42s"), ci="true")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 skipped test(s) listed" in r.stdout
    for line in ALLOWED:
        assert f"[ok ] {line}" in r.stdout
    assert "skip_policy: OK" in r.stdout


def test_disallowed_skip_fails_under_ci_and_is_named(tmp_path):
    lines = ALLOWED + [
        "SKIPPED [1] tests/test_b.py:51: no-docker: no Docker daemon answers",
        "SKIPPED [1] tests/test_b.py:60: could not import 'kubernetes': No module named 'kubernetes'",
    ]
    r = run_policy(fake_log(lines, "3 passed, 6 skipped in 1.00s"), ci="true",
                   via_file=tmp_path / "pytest.log")
    assert r.returncode == 1, r.stdout
    assert "[BAD] SKIPPED [1] tests/test_b.py:51: no-docker: no Docker daemon answers" in r.stdout
    assert "tests/test_b.py:51: no-docker: no Docker daemon answers" in r.stdout
    assert "tests/test_b.py:60: could not import 'kubernetes'" in r.stdout
    assert "2 skip reason(s) not starting with an allowed prefix" in r.stdout
    assert "FAIL" in r.stdout


@pytest.mark.parametrize("reason", [
    "",  # bare @pytest.mark.skip
    "unconditional skip",
    "requires cmake",
    "NO-GPU: wrong case",
    " no-gpu: leading space is not the prefix",
    "gpu: missing the no- prefix",
    "no-gpu missing the colon",
    "no-docker: not in the allowed list",
])
def test_each_disallowed_reason_fails(reason):
    line = f"SKIPPED [1] tests/test_a.py:3: {reason}".rstrip()
    r = run_policy(fake_log([line], "1 skipped in 0.01s"), ci="true")
    assert r.returncode == 1, (reason, r.stdout)


def test_disallowed_skip_only_reported_without_ci():
    log = fake_log(["SKIPPED [1] tests/test_a.py:3: flaky, skip for now"], "1 passed, 1 skipped in 0.1s")
    for ci in (None, "false", ""):
        r = run_policy(log, ci=ci)
        assert r.returncode == 0, r.stdout
        assert "[BAD]" in r.stdout and "reporting only" in r.stdout
    # CI=True / TRUE also count as CI
    assert run_policy(log, ci="TRUE").returncode == 1
    # explicit flags override the environment
    assert run_policy(log, "--strict", ci=None).returncode == 1
    assert run_policy(log, "--report-only", ci="true").returncode == 0


def test_no_skips_passes():
    log = fake_log([], "9 passed in 0.5s")
    r = run_policy(log, ci="true")
    assert r.returncode == 0
    assert "0 skipped test(s) listed" in r.stdout


def test_other_summary_lines_are_ignored():
    lines = [
        "FAILED tests/test_a.py::test_x - AssertionError: SKIPPED [1] x.py:1: bogus",
        "ERROR tests/test_a.py::test_y - RuntimeError",
        "XFAIL tests/test_a.py::test_z - known bug",
        "SKIPPED [1] tests/test_a.py:9: no-gpu: none",
    ]
    r = run_policy(fake_log(lines, "1 failed, 1 error, 1 skipped, 1 xfailed in 2s"), ci="true")
    assert r.returncode == 0, r.stdout
    assert "1 skipped test(s) listed" in r.stdout


def test_skips_outside_the_summary_section_are_ignored():
    log = "SKIPPED [1] tests/printed_by_a_test.py:1: bogus\n" + fake_log(
        ["SKIPPED [1] tests/test_a.py:9: no-upstream: no checkout"], "1 skipped in 0.1s")
    assert run_policy(log, ci="true").returncode == 0


def test_unfolded_format_and_ansi_colour():
    lines = [
        "\x1b[33mSKIPPED\x1b[0m [1] tests/test_a.py:9: no-gpu: none",
        "SKIPPED tests/test_b.py::test_k8s - no-cluster: none",
        "SKIPPED tests/test_b.py::test_bad - Skipped: because",
    ]
    r = run_policy(fake_log(lines, "3 skipped in 0.1s"), ci="true")
    assert r.returncode == 1
    assert "tests/test_b.py::test_bad: because" in r.stdout
    assert "3 skipped test(s) listed" in r.stdout


def test_skips_hidden_from_summary_fail_under_ci():
    # stats say 2 skipped, but the summary (no -ra) lists none
    log = "tests/test_a.py ss\n\n============ 2 skipped in 0.01s ============\n"
    r = run_policy(log, ci="true")
    assert r.returncode == 1
    assert "pytest reported 2 skipped but only 0 are listed" in r.stdout
    # same with -q (no "=" rule around the stats line) and a long-run duration
    r = run_policy("ss\n1 passed, 2 skipped, 3 warnings in 75.20s (0:01:15)\n", ci="true")
    assert r.returncode == 1
    assert "pytest reported 2 skipped" in r.stdout


def test_custom_allow_prefixes():
    log = fake_log(["SKIPPED [1] tests/test_a.py:3: no-docker: x"], "1 skipped in 0.1s")
    assert run_policy(log, "--strict", "--allow", "no-docker:").returncode == 0
    assert run_policy(log, "--strict", "--allow", "no-gpu:").returncode == 1


def test_unreadable_log_is_usage_error(tmp_path):
    r = subprocess.run([sys.executable, str(POLICY), str(tmp_path / "missing.log")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2


def test_policy_on_a_real_pytest_run(tmp_path):
    """End to end: real pytest output (default folded format) through the policy."""
    (tmp_path / "test_fake.py").write_text(textwrap.dedent(
        """\
        import pytest

        def test_ok():
            pass

        @pytest.mark.skip(reason="no-gpu: fake")
        def test_gpu():
            pass

        def test_runtime_skip():
            pytest.skip("no-cluster: fake")

        @pytest.mark.parametrize("n", [1, 2])
        def test_bad(n):
            pytest.skip("not allowed")
        """))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "-o", "addopts=",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    assert run.returncode == 0, run.stdout
    assert run_policy(run.stdout, ci=None).returncode == 0
    r = run_policy(run.stdout, ci="true")
    assert r.returncode == 1, r.stdout
    assert "4 skipped test(s) listed" in r.stdout
    assert "not allowed (x2)" in r.stdout
    assert "no-gpu: fake" in r.stdout and "no-cluster: fake" in r.stdout


# ------------------------------------------------------------ .ci/run shape

def test_ci_run_scripts_are_valid_bash():
    for script in (CI_RUN, DOCKER_BASE_SH):
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script}: {r.stderr}"
    assert os.access(CI_RUN, os.X_OK), ".ci/run must be executable"


def test_ci_run_wires_the_contract():
    text = CI_RUN.read_text()
    for needle in (
        "docker.io", "quilt", "valgrind", "busybox-static", "--no-install-recommends",
        "DEBIAN_FRONTEND=noninteractive",
        "python3 -m pip install -e '.[test]'",
        "dockerd --storage-driver=vfs --iptables=false --bridge=none",
        "tests/docker_base.sh",
        "docker run --rm --network none",
        "python3 -m pytest -ra",
        "tee",
        ".ci/skip_policy.py",
        '"$pytest_rc" = 5',
    ):
        assert needle in text, f".ci/run lost {needle!r}"



def test_expect_prefix_fails_when_the_premise_did_not_hold():
    with_docker_skip = fake_log(["SKIPPED [1] tests/test_a.py:3: no-docker: no daemon",
                                 "SKIPPED [1] tests/test_a.py:9: no-tool: quilt not found"], "2 skipped in 0.1s")
    args = ("--strict", "--allow", "no-docker:", "--allow", "no-tool:", "--expect", "no-docker:")
    assert run_policy(with_docker_skip, *args).returncode == 0
    only_tool = fake_log(["SKIPPED [1] tests/test_a.py:9: no-tool: quilt not found"], "1 skipped in 0.1s")
    r = run_policy(only_tool, *args)
    assert r.returncode == 1
    assert "expected at least one skip reason starting with 'no-docker:'" in r.stdout


# ------------------------------------------------------------ the newcomer stage

NEWCOMER = REPO / ".ci" / "newcomer"


def test_newcomer_stage_runs_the_readme_commands_verbatim():
    sys.path.insert(0, str(REPO / ".ci"))
    try:
        import readme_commands
    finally:
        sys.path.pop(0)
    assert readme_commands.commands(REPO / "README.md") == ["pip install -e '.[test]'", "python3 -m pytest -ra"]
    r = subprocess.run(["bash", "-n", str(NEWCOMER)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.access(NEWCOMER, os.X_OK)
    text = NEWCOMER.read_text()
    for needle in ("readme_commands.py", "python3 -m venv", "-u CI", 'DOCKER_HOST=unix://$WORK/no-docker.sock',
                   "unshare -m", "mount --bind /dev/null", "--allow no-docker: --allow no-tool: --expect no-docker:"):
        assert needle in text, f".ci/newcomer lost {needle!r}"
    run = CI_RUN.read_text()
    assert "stage newcomer" in run and "bash .ci/newcomer" in run and "chromium" in run


NEEDS_TEST = '''
import needs
import pytest

@pytest.mark.needs("lucepatch-no-such-tool-xyz")
def test_marked():
    pass

def test_called():
    needs.tool("lucepatch-no-such-tool-xyz")

def test_present():
    assert needs.tool("sh")

def test_docker(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    needs.docker_client(timeout=2)
'''


@pytest.mark.parametrize("ci", [None, "true"])
def test_needs_skips_here_and_fails_under_ci(tmp_path, ci):
    """tests/needs.py + conftest's marker hook: a no-tool:/no-docker: skip naming the gap, a failure under CI=true."""
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\nimport needs\n"
        "def pytest_collection_modifyitems(config, items):\n    needs.mark_missing(items)\n"
        "def pytest_runtest_setup(item):\n    needs.check_marks(item)\n"
        "def pytest_configure(config):\n    config.addinivalue_line('markers', 'needs(*tools): test needs')\n")
    (tmp_path / "test_needs.py").write_text(NEEDS_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci:
        env["CI"] = ci
    run = subprocess.run([sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--rootdir", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    out = run.stdout
    if ci:
        assert run.returncode == 1, out
        assert "2 failed, 1 passed, 1 error" in out, out  # the marked one fails in setup
        assert "CI=true: .ci/run installs this" in out
    else:
        assert run.returncode == 0, out
        assert "1 passed, 3 skipped" in out, out
        assert "SKIPPED [1] test_needs.py:5: no-tool: lucepatch-no-such-tool-xyz not found (" in out
        assert out.count("no-tool: lucepatch-no-such-tool-xyz not found") == 2
        assert "no-docker: no Docker daemon answers at unix://" in out
        assert run_policy(out, "--strict", "--allow", "no-docker:", "--allow", "no-tool:").returncode == 0
        assert run_policy(out, ci="true").returncode == 1


# ------------------------------------------------------------ the real upstreams in CI (issue 24)

def test_with_upstream_allows_no_upstream_only_for_what_ci_cannot_have():
    """With the bundle cloned, a HAMi-core test that skips for want of its checkout fails CI; Lucebox,
    a ggml build and the vendor's fork library may still skip, each listed with why."""
    hami = "SKIPPED [1] tests/test_a.py:3: no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout"
    lucebox = "SKIPPED [1] tests/test_b.py:7: no-upstream: LUCEPATCH_SRC_LUCEBOX is not set (lucebox-hub 8305b6c)"
    fork = "SKIPPED [1] tests/test_c.py:9: no-upstream: set LUCEPATCH_FORK_LIB to beclab/HAMi v2.5.4's libvgpu.so"
    ok = fake_log([lucebox, fork, "SKIPPED [1] tests/test_d.py:1: no-gpu: none"], "3 skipped in 0.1s")
    r = run_policy(ok, "--with-upstream", ci="true")
    assert r.returncode == 0, r.stdout
    assert "LUCEPATCH_SRC_LUCEBOX: lucebox-hub" in r.stdout and "LUCEPATCH_FORK_LIB: beclab" in r.stdout
    bad = fake_log([lucebox, hami], "2 skipped in 0.1s")
    r = run_policy(bad, "--with-upstream", ci="true")
    assert r.returncode == 1 and "[BAD] " + hami in r.stdout, r.stdout
    assert run_policy(bad, ci="true").returncode == 0  # without the bundle (a developer's CI=true run) it may skip


def test_ci_run_clones_the_bundle_and_gates_the_upstream_skips(tmp_path):
    run = CI_RUN.read_text()
    for needle in ("stage upstream", "bash .ci/upstream", 'export LUCEPATCH_SRC_HAMI_CORE=',
                   'skip_policy.py $WITH_UPSTREAM', "../shared/upstream/hami-core.bundle",
                   "stage main-job", "bash .ci/main-job", '"$main_job_rc" != 0'):
        assert needle in run, f".ci/run lost {needle!r}"
    mj = REPO / ".ci" / "main-job"
    assert os.access(mj, os.X_OK) and subprocess.run(["bash", "-n", str(mj)]).returncode == 0
    text = mj.read_text()
    for needle in ('--block "The main job: prove the HAMi-core fix"', 'python3 -m venv "$WORK/venv"', "env -i",
                   '"url.$SRC.insteadOf" https://github.com/Project-HAMi/HAMi-core', '"verdict"] == "proven"'):
        assert needle in text, f".ci/main-job lost {needle!r}"
    up = REPO / ".ci" / "upstream"
    assert os.access(up, os.X_OK) and subprocess.run(["bash", "-n", str(up)]).returncode == 0
    assert '"$REPO/../shared/upstream/hami-core.bundle"' in up.read_text()
    assert '$REPO/../shared/upstream/hami-core-main-2026-07-23.bundle' in up.read_text()
    # no bundle: exit 3 and nothing cloned
    env = {**os.environ, "LUCEPATCH_HAMI_CORE_BUNDLE": str(tmp_path / "none.bundle")}
    r = subprocess.run(["bash", str(up), str(tmp_path / "clone")], capture_output=True, text=True, env=env)
    assert r.returncode == 3 and "no HAMi-core bundle" in r.stderr and not (tmp_path / "clone").exists()


def _bundle() -> Path | None:
    for cand in (os.environ.get("LUCEPATCH_HAMI_CORE_BUNDLE"), REPO.parent / "shared" / "upstream" / "hami-core.bundle"):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


def _main_bundle() -> Path | None:
    for cand in (os.environ.get("LUCEPATCH_HAMI_CORE_MAIN_BUNDLE"),
                 REPO.parent / "shared" / "upstream" / "hami-core-main-2026-07-23.bundle"):
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


@pytest.mark.skipif(_bundle() is None or _main_bundle() is None,
                    reason="no-upstream: ../shared/upstream/hami-core.bundle and hami-core-main-2026-07-23.bundle are "
                           "not beside the checkout")
def test_ci_upstream_clone_has_every_base_and_the_pr_heads(tmp_path):
    env = {**os.environ, "LUCEPATCH_HAMI_CORE_BUNDLE": str(_bundle()), "LUCEPATCH_HAMI_CORE_MAIN_BUNDLE": str(_main_bundle())}
    r = subprocess.run(["bash", str(REPO / ".ci" / "upstream"), str(tmp_path / "hc")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == str(tmp_path / "hc")
    assert "hami-core base 52f33fc7fa1f present" in r.stdout and "hami-core-v2.5 base 54b130550325 present" in r.stdout
    assert "hami-core-v2.9 base 8f3a89c67b03 present" in r.stdout
    rev = lambda ref: subprocess.run(["git", "-C", str(tmp_path / "hc"), "rev-parse", "-q", "--verify", ref],  # noqa: E731
                                     capture_output=True, text=True).stdout.strip()
    # the clone's main is upstream main of 2026-07-23 (the main line's base), as a clone of GitHub gave then
    assert rev("refs/pull/188/head") and rev("HEAD").startswith("52f33fc") and rev("8f3a89c^{commit}")
