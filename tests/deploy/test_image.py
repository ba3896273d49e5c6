"""``make image`` and the checkout (issue 24 §1): a cold ``make image`` left debootstrap's /proc
mounted under build/docker/rootfs-*/, after which ``pip install -e .`` never returned (setuptools'
package discovery followed /proc/self/cwd back into the checkout, forever) and ``rm -rf build``
walked into procfs.

Checked here: after ``make image`` (``make test`` runs it first) nothing is mounted below the
checkout and no root file system is left in it; ``pip install -e .`` into a fresh venv finishes
with build/ present, a link in it leading back to the checkout as /proc/self/cwd did;
deploy/docker/base-image.sh unmounts what is mounted below a root file system, imports it
without what was mounted and deletes it; ``make clean`` removes build/ without walking into a
mount. The mounting tests need root, as debootstrap does.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.deploy.compose import docker

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "deploy" / "docker"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting (as debootstrap does) needs root")


def mounts_below(path: Path) -> list[str]:
    """Mount points strictly below ``path``, from /proc/self/mountinfo."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in f]
    return sorted(p for p in points if p.startswith(prefix))


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, timeout=30)


def unmount_all_below(path: Path) -> None:
    """Test cleanup, whatever the code under test did: lazily, deepest first."""
    for point in sorted(mounts_below(path), reverse=True):
        subprocess.run(["umount", "-l", point], timeout=30)


def run_bounded(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """``cmd`` in a session of its own, killed with everything it started when ``timeout`` passes
    (pip runs the build backend in a child process: killing pip alone would leave it spinning)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            **kw)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout:.0f} s") from None
    except BaseException:  # pytest-timeout, ^C: nothing left running
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def test_after_make_image_nothing_is_mounted_below_the_checkout_and_no_root_file_system_is_left():
    assert mounts_below(REPO) == []
    docker_dir = REPO / "build" / "docker"
    left = sorted(p.name for p in docker_dir.glob("rootfs-*") if p.is_dir()) if docker_dir.is_dir() else []
    assert left == [], f"root file systems left in {docker_dir} after import"


@pytest.mark.timeout(420)
def test_pip_install_editable_into_a_fresh_venv_finishes_with_build_present(tmp_path):
    build = REPO / "build"
    build.mkdir(exist_ok=True)
    # What a live procfs in build/docker/rootfs-* was: ways back to the checkout (/proc/<pid>/cwd,
    # /proc/self/task/<pid>/cwd, ...), more than one, so that a walk following links never ends.
    tag = uuid.uuid4().hex[:8]
    loops = [build / f"link-to-the-checkout-{tag}-{i}" for i in range(2)]
    for loop in loops:
        loop.symlink_to(REPO, target_is_directory=True)
    try:
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        # --no-deps: the build (package discovery) is what is under test, not the dependencies.
        result = run_bounded([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "-e", str(REPO)], 240,
                             cwd=REPO)
    finally:
        for loop in loops:
            loop.unlink()
    assert result.returncode == 0, result.stdout[-3000:]
    assert build.is_dir()
    # the editable install maps every package to the checkout (found, not imported: no dependencies here)
    code = ("import importlib.util as u; print(*(u.find_spec(p).origin for p in "
            "('protocol', 'storage', 'broker', 'controller', 'loadgen', 'cli')))")
    check = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == [str(REPO / p / "__init__.py") for p in
                                    ("protocol", "storage", "broker", "controller", "loadgen", "cli")]


def fake_root_file_system(path: Path) -> Path:
    """A root file system as debootstrap leaves it when it is done (``.complete``)."""
    (path / "etc").mkdir(parents=True)
    (path / "etc" / "kbroker-test-marker").write_text("x\n")
    for d in ("proc", "mnt/host", "run"):
        (path / d).mkdir(parents=True)
    (path / ".complete").touch()
    return path


def image_files(image: str) -> list[str]:
    container = docker("create", image, "/nothing").stdout.strip()
    try:
        exported = subprocess.run(["docker", "export", container], capture_output=True, timeout=120).stdout
    finally:
        docker("rm", container)
    listing = subprocess.run(["tar", "t"], input=exported, capture_output=True, timeout=60).stdout.decode()
    return [n.removeprefix("./") for n in listing.split()]


# No /proc is mounted in what the old base-image.sh would tar: reading a live /proc/kcore into
# docker import would fill the disk. unmount-below.sh's own test mounts one.
@needs_root
def test_base_image_unmounts_imports_without_the_mounts_and_deletes_the_tree(tmp_path):
    rootfs = fake_root_file_system(tmp_path / "rootfs-test")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_text("not the image's, nor the rootfs' to delete\n")
    image = f"kbroker-test-base:{uuid.uuid4().hex[:12]}"
    try:
        mount("--bind", str(outside), str(rootfs / "mnt" / "host"))
        mount("-t", "tmpfs", "tmpfs", str(rootfs / "run"))
        (rootfs / "run" / "left-by-a-maintainer-script").write_text("x\n")
        result = run_bounded([str(SCRIPTS / "base-image.sh"), image, str(rootfs), "none"], 300)
        assert result.returncode == 0, result.stdout[-3000:]
        assert mounts_below(tmp_path) == []
        assert not rootfs.exists(), "the root file system is deleted once imported"
        assert (outside / "keep-me").exists()
        files = image_files(image)
        assert "etc/kbroker-test-marker" in files
        assert not [n for n in files if "keep-me" in n or "left-by-a-maintainer-script" in n], files
        # a second run finds the image and does nothing more
        again = run_bounded([str(SCRIPTS / "base-image.sh"), image, str(rootfs), "none"], 120)
        assert again.returncode == 0 and "exists" in again.stdout
    finally:
        unmount_all_below(tmp_path)
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, timeout=120)


@needs_root
def test_base_image_refuses_to_import_a_tree_with_a_mount_it_cannot_remove(tmp_path):
    rootfs = fake_root_file_system(tmp_path / "rootfs-test")
    image = f"kbroker-test-base:{uuid.uuid4().hex[:12]}"
    fake = tmp_path / "bin"  # an umount that fails: unmount-below.sh finds it first on PATH
    fake.mkdir()
    (fake / "umount").write_text("#!/bin/sh\nexit 1\n")
    (fake / "umount").chmod(0o755)
    try:
        mount("-t", "tmpfs", "tmpfs", str(rootfs / "run"))
        result = run_bounded([str(SCRIPTS / "base-image.sh"), image, str(rootfs), "none"], 120,
                             env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
        assert result.returncode != 0 and "refusing to docker import" in result.stdout, result.stdout
        assert subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0
    finally:
        unmount_all_below(tmp_path)
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, timeout=120)


@needs_root
def test_unmount_below_takes_proc_and_nested_mounts_off_deepest_first(tmp_path):
    tree = tmp_path / "root fs"  # a space: mountinfo escapes it as \040
    for d in ("proc", "a"):
        (tree / d).mkdir(parents=True)
    try:
        mount("-t", "proc", "proc", str(tree / "proc"))
        mount("-t", "tmpfs", "tmpfs", str(tree / "a"))
        (tree / "a" / "b").mkdir()
        mount("-t", "tmpfs", "tmpfs", str(tree / "a" / "b"))
        mount("-t", "tmpfs", "tmpfs", str(tree / "a" / "b"))  # stacked
        assert len(mounts_below(tmp_path)) == 4
        check = run_bounded([str(SCRIPTS / "unmount-below.sh"), "--check", str(tree)], 60)
        assert check.returncode == 1 and str(tree / "proc") in check.stdout
        result = run_bounded([str(SCRIPTS / "unmount-below.sh"), str(tree)], 60)
        assert result.returncode == 0, result.stdout
        assert mounts_below(tmp_path) == []
    finally:
        unmount_all_below(tmp_path)


@needs_root
def test_make_clean_removes_build_without_walking_into_a_mount(tmp_path):
    """In a scratch copy (``make clean`` also removes .venv and data/)."""
    work = tmp_path / "checkout"
    (work / "deploy" / "docker").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", work / "Makefile")
    shutil.copy(SCRIPTS / "unmount-below.sh", work / "deploy" / "docker" / "unmount-below.sh")
    proc_dir = work / "build" / "docker" / "rootfs-zookeeper" / "proc"
    proc_dir.mkdir(parents=True)
    (work / "build" / "wheels").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_text("x\n")
    try:
        mount("--bind", str(outside), str(proc_dir))
        result = run_bounded(["make", "-C", str(work), "clean"], 120)
        assert result.returncode == 0, result.stdout
        assert mounts_below(work) == []
        assert not (work / "build").exists()
        assert (outside / "keep-me").exists(), "rm walked into what was mounted below build/"
    finally:
        unmount_all_below(tmp_path)
