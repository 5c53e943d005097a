"""Static checks of the argus-ray-node image: no Docker engine needed.

The Dockerfile is linted with hadolint and read instruction by instruction; the
entrypoint is run for real with /bin/sh, with a stand-in ``argus-node`` on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
IMAGE_DIR = REPO / "images" / "argus-ray-node"
DOCKERFILE = IMAGE_DIR / "Dockerfile"
DOCKERIGNORE = IMAGE_DIR / "Dockerfile.dockerignore"
ENTRYPOINT = IMAGE_DIR / "entrypoint.sh"
WRAPPER = IMAGE_DIR / "argus_node.py"
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def copy_sources(args: str) -> list[str]:
    """Source paths of a COPY/ADD (flags dropped, last word is the destination)."""
    words = [w for w in args.split() if not w.startswith("--")]
    return words[:-1]


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def hadolint(path: Path) -> list[dict]:
    proc = subprocess.run(
        [str(HADOLINT), "--no-color", "-f", "json", "--failure-threshold", "style", str(path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert proc.stdout.strip(), f"hadolint printed nothing: {proc.stderr}"
    return json.loads(proc.stdout)


def test_hadolint_reports_nothing_on_the_dockerfile() -> None:
    findings = hadolint(DOCKERFILE)
    assert findings == [], "\n".join(
        f"line {f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings
    )


def test_hadolint_reports_nothing_on_the_postgres_dockerfile() -> None:
    """images/argus-postgres: the CPU profile's PostgreSQL (docker-compose.ha.yaml)."""
    findings = hadolint(REPO / "images" / "argus-postgres" / "Dockerfile")
    assert findings == [], "\n".join(
        f"line {f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings
    )


def test_hadolint_is_really_linting(tmp_path: Path) -> None:
    # Guards the check above: an empty result must mean "clean", not "did not run".
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN cd /tmp && pip install ray\n")
    codes = {f["code"] for f in hadolint(bad)}
    assert {"DL3006", "DL3003", "DL3013"} <= codes


def test_base_image_is_a_build_arg_with_the_verl_default(dockerfile) -> None:
    first_from = next(i for i, (op, _) in enumerate(dockerfile) if op == "FROM")
    before = dict(dockerfile[:first_from])
    assert before.get("ARG") == "BASE_IMAGE=verlai/verl:sgl055.latest"
    assert dockerfile[first_from][1] == "${BASE_IMAGE}"
    assert [op for op, _ in dockerfile].count("FROM") == 1


def test_entrypoint_is_the_argus_entrypoint_in_exec_form(dockerfile) -> None:
    entrypoints = [args for op, args in dockerfile if op == "ENTRYPOINT"]
    assert entrypoints, "no ENTRYPOINT"
    assert json.loads(entrypoints[-1]) == ["/usr/local/bin/argus-entrypoint"]
    copies = [args for op, args in dockerfile if op == "COPY"]
    assert any(
        args.split()[-2:] == ["images/argus-ray-node/entrypoint.sh",
                              "/usr/local/bin/argus-entrypoint"]
        for args in copies
    )
    assert "CMD" not in [op for op, _ in dockerfile], "the entrypoint decides, not CMD"


def test_only_the_node_runtime_goes_in(dockerfile) -> None:
    sources = [s for op, args in dockerfile if op in ("COPY", "ADD")
               for s in copy_sources(args)]
    assert sources, "nothing copied"
    for src in sources:
        top = Path(src).parts[0]
        assert top in ("raypool", "images"), f"copies {src!r}: only raypool/ and the image dir"
        assert (REPO / src).exists(), f"COPY source {src} is missing from the repository"
    assert "ADD" not in [op for op, _ in dockerfile]
    text = DOCKERFILE.read_text()
    assert not re.search(r"pip[0-9.]* install[^\n]*(\s\.(\s|$)|/opt/argus|service)", text), (
        "pip-installs the repository or the service"
    )


def test_build_context_allows_only_raypool_and_the_image_dir() -> None:
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "the context must start from nothing"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    assert allowed == {"raypool", "images/argus-ray-node"}


def test_ray_is_checked_never_reinstalled(dockerfile) -> None:
    runs = [args for op, args in dockerfile if op == "RUN"]
    assert any("ray --version" in r for r in runs)
    for r in runs:
        assert not re.search(r"pip[0-9.]* install\b.*\bray\b", r), f"reinstalls Ray: {r}"


def test_image_packages_come_from_the_lock(dockerfile) -> None:
    """supervisor and Jinja2 are installed by hash from the lock's export, nothing floats."""
    copies = [a for op, a in dockerfile if op == "COPY"]
    assert any(a.startswith("images/argus-ray-node/requirements.txt ") for a in copies)
    runs = [a for op, a in dockerfile if op == "RUN" and "pip" in a and "install" in a]
    assert runs, "no pip install in the Dockerfile"
    for run in runs:
        assert "--require-hashes" in run and "--no-deps" in run, run
        assert "==" not in run, f"a version pinned outside the lock: {run}"
    pinned = (IMAGE_DIR / "requirements.txt").read_text()
    assert re.search(r"^supervisor==\d", pinned, re.M)
    assert re.search(r"^jinja2==\d", pinned, re.M)


def test_labels_and_healthcheck(dockerfile) -> None:
    labels = " ".join(a for op, a in dockerfile if op == "LABEL")
    assert "org.opencontainers.image.title=" in labels
    checks = [a for op, a in dockerfile if op == "HEALTHCHECK"]
    assert len(checks) == 1
    probe = checks[0].split(" CMD ", 1)[1]
    assert json.loads(probe)[0] in ("argus-node", "supervisorctl")


def test_no_syntax_directive() -> None:
    # `# syntax=docker/dockerfile:1` makes BuildKit pull its frontend from Docker Hub: the
    # build would fail on every host without it (mirror-only, air-gapped).
    first = DOCKERFILE.read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.IGNORECASE), first


def test_nothing_sleeps_forever() -> None:
    for path in (DOCKERFILE, ENTRYPOINT):
        assert "sleep infinity" not in path.read_text()


# -- the entrypoint, run with /bin/sh ---------------------------------------------------


@pytest.fixture
def fake_argus_node(tmp_path: Path) -> Path:
    """A stand-in ``argus-node`` that reports its pid, arguments and role."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "argus-node"
    fake.write_text('#!/bin/sh\necho "pid=$$ args=$* role=$ARGUS_ROLE"\n')
    fake.chmod(0o755)
    return bindir


def run_entrypoint(bindir: Path, role: str | None, *args: str):
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    if role is not None:
        env["ARGUS_ROLE"] = role
    proc = subprocess.Popen(
        ["/bin/sh", str(ENTRYPOINT), *args], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    out, err = proc.communicate(timeout=30)
    return proc, out, err


@pytest.mark.parametrize("role", ["head", "worker", "api"])
def test_entrypoint_execs_argus_node_run(fake_argus_node: Path, role: str) -> None:
    proc, out, err = run_entrypoint(fake_argus_node, role)
    assert proc.returncode == 0, err
    # Same pid: the shell replaced itself (exec), so supervisord becomes PID 1.
    assert out.strip() == f"pid={proc.pid} args=run role={role}"


@pytest.mark.parametrize(
    ("role", "message"),
    [(None, "ARGUS_ROLE is not set"), ("", "ARGUS_ROLE is not set"),
     ("Head", "must be 'head', 'worker' or 'api', got 'Head'"),
     ("worker; rm -rf /", "got 'worker; rm -rf /'")],
)
def test_entrypoint_refuses_a_missing_or_bad_role(
    fake_argus_node: Path, role: str | None, message: str
) -> None:
    proc, out, err = run_entrypoint(fake_argus_node, role)
    assert proc.returncode == 64
    assert message in err
    assert out == "", "argus-node must not start"


def test_entrypoint_runs_a_given_command_instead(fake_argus_node: Path) -> None:
    proc, out, _ = run_entrypoint(fake_argus_node, None, "echo", "inspect only")
    assert proc.returncode == 0
    assert out == "inspect only\n"


def test_entrypoint_and_wrapper_are_executable() -> None:
    for path in (ENTRYPOINT, WRAPPER):
        assert os.access(path, os.X_OK), f"{path} lost its executable bit"
    mode = subprocess.run(
        ["git", "ls-files", "-s", str(ENTRYPOINT.relative_to(REPO))],
        capture_output=True, text=True, cwd=REPO, check=True,
    ).stdout.split()[0]
    assert mode == "100755"


def test_entrypoint_passes_sh_and_shellcheck() -> None:
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True, timeout=30)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/bootstrap.sh installs it)")
    proc = subprocess.run(["shellcheck", "-s", "sh", str(ENTRYPOINT)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def stage_image_files(dockerfile: list[tuple[str, str]], root: Path) -> None:
    """Carry out the Dockerfile's COPY instructions under ``root`` instead of ``/``."""
    for op, args in dockerfile:
        if op != "COPY":
            continue
        (src,), dest = copy_sources(args), args.split()[-1]
        target = root / dest.lstrip("/")
        if (REPO / src).is_dir():
            shutil.copytree(REPO / src, target,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / src, target)


def test_the_image_layout_runs_the_node_cli(dockerfile, tmp_path: Path) -> None:
    """raypool as the image holds it: /opt/argus on the path (the .pth), the wrapper as
    /usr/local/bin/argus-node. ``python -S`` skips site-packages .pth files, so the
    repository's editable install cannot stand in for the copied package."""
    stage_image_files(dockerfile, tmp_path)
    runs = " ".join(a for op, a in dockerfile if op == "RUN")
    assert "echo /opt/argus > " in runs and ".pth" in runs
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PATH": os.environ["PATH"],
           "PYTHONPATH": f"{tmp_path / 'opt' / 'argus'}:{site_packages}"}
    probe = ("import raypool, raypool.cli, raypool.supervisor as s, os; "
             "print(raypool.__file__); print(os.path.isfile(s.template_path()))")
    out = subprocess.run([sys.executable, "-S", "-c", probe], env=env, capture_output=True,
                         text=True, timeout=60, check=True, cwd=tmp_path).stdout.split()
    assert out == [str(tmp_path / "opt/argus/raypool/__init__.py"), "True"]
    assert not (tmp_path / "opt/argus/service").exists()
    for argv in (["-m", "raypool.cli", "--help"],
                 [str(tmp_path / "usr/local/bin/argus-node"), "--help"]):
        proc = subprocess.run([sys.executable, "-S", *argv], env=env, capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "run" in proc.stdout and "status" in proc.stdout
