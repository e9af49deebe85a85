"""``lab down`` removes the lab's run folder without ever deleting through a mount below it.

The lab stages bind mounts of this machine's vLLM venv, models and base Python under the run
folder; an ``rmtree`` over one of them (a daemon that died without unmounting, or a second lab
on the same run folder) deleted the real interpreter once. Real mounts here, as root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dflashops.lab.errors import LabError
from dflashops.lab.run_folder import daemon_using, mounts_below, remove_run_folder

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root"),
]


def test_a_bind_below_the_run_folder_is_unmounted_not_emptied(tmp_path: Path) -> None:
    precious = tmp_path / "python"
    precious.mkdir()
    (precious / "os.py").write_text("# the interpreter's own file\n")
    run = tmp_path / "run dir"  # a space: mountinfo escapes it as \\040
    stage = run / "mnt" / "0"
    stage.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(precious), str(stage)], check=True)
    try:
        assert mounts_below(run) == [stage]
        remove_run_folder(run)
    finally:
        subprocess.run(["umount", "-l", str(stage)], check=False)
    assert not run.exists()
    assert (precious / "os.py").read_text() == "# the interpreter's own file\n"


def test_a_mount_that_stays_stops_the_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert daemon_using(tmp_path / "run") is None  # no lab daemon runs from there
    remove_run_folder(tmp_path / "absent")  # nothing there: nothing to do
    run = tmp_path / "run"
    (run / "m").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(run / "m")], check=True)
    (run / "m" / "kept").write_text("x")
    real_run = subprocess.run

    def umount_fails(argv: list[str], **kwargs: Any) -> Any:
        if argv[0] == "umount":
            return subprocess.CompletedProcess(argv, 32)
        return real_run(argv, **kwargs)

    try:
        monkeypatch.setattr(subprocess, "run", umount_fails)
        with pytest.raises(LabError, match="still mounted"):
            remove_run_folder(run)
        monkeypatch.undo()
        assert (run / "m" / "kept").read_text() == "x"  # nothing deleted through it
    finally:
        real_run(["umount", "-l", str(run / "m")], check=False)


def test_a_read_only_source_is_staged_read_only(tmp_path: Path) -> None:
    from dflashops.lab.daemon import stage_mounts, unstage_mounts
    from dflashops.lab.host_model import Mount
    from dflashops.lab.paths import LabPaths

    home = Path("/root") / f".dflashops-stage-test-{os.getpid()}"  # a PRIVATE source: staged
    home.mkdir()
    (home / "os.py").write_text("# the interpreter's own file\n")
    paths = LabPaths(state=tmp_path / "state", run=tmp_path / "run")
    try:
        (staged,) = stage_mounts(paths, [Mount.bind(home, "/opt/py")])
        assert staged.source == paths.run / "mnt" / "0" and staged.read_only
        with pytest.raises(OSError, match="Read-only file system"):
            (staged.source / "os.py").unlink()
    finally:
        unstage_mounts(paths)
        (home / "os.py").unlink()
        home.rmdir()
