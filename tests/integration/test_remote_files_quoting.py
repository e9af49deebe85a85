"""An atomic put hands every path to the remote shell as one word (issue 20).

The commit step runs over real SSH with a temp file whose checksum does not match, so it takes
the corrupt-upload branch, which once put the target path inside single quotes unquoted: a
drafter path holding ``'`` ran commands in the container while the push reported success.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.lab.host_model import SshHost
from dflashops.remote import RemoteTransferError
from dflashops.remote.files import FileUpload, _commit, _Plan
from tests.support.ssh_hosts import connect_to

pytestmark = pytest.mark.timeout(120)

HOSTILE = [
    "x'; touch {marker}; echo '",
    'x"; touch {marker}; echo "',
    "x$(touch {marker})",
    "x`touch {marker}`",
    "x\ntouch {marker}\n",
    "x; touch {marker} #",
]


@pytest.mark.root
def test_a_hostile_path_reaches_the_shell_as_one_word(
    loopback_host: SshHost, tmp_path: Path
) -> None:
    tmp_path.chmod(0o777)
    with connect_to(loopback_host) as conn:
        for number, shape in enumerate(HOSTILE):
            marker = tmp_path / f"injected-{number}"
            target = tmp_path / shape.format(marker=marker)
            temp = tmp_path / f"upload-{number}.tmp"
            temp.write_bytes(b"what arrived")
            plan = _Plan(
                upload=FileUpload(str(target), b"what was sent", 0o644),
                sha256="0" * 64,  # never the temp's: the corrupt branch runs
                size=13,
                exists=False,
                same_content=False,
                same_mode=False,
                temp=str(temp),
            )
            with pytest.raises(RemoteTransferError, match="corrupt") as caught:
                _commit(conn, [plan], deadline=30)
            assert not marker.exists(), (shape, str(caught.value))
            assert f"corrupt {str(target).rstrip()}" in str(caught.value)
            assert not temp.exists() and not target.exists()
