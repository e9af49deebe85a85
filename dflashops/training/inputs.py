"""What a run is made of: the playbook's ``train:`` section, the dataset and the served target,
turned into the job file the container's stages read.

A local dataset is read strictly here, before anything is pushed: a bad line is a one-line
:class:`~dflashops.errors.ConfigError` naming ``file:line`` (exit 2). A dataset already in the
container is counted there; the data stage reads it with the same reader and fails the same way.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

from dflashops.deployment.layout import Layout
from dflashops.deployment.manifest import DeployedManifest
from dflashops.errors import ConfigError, PlaybookError
from dflashops.launch.args import VLLM_API_KEY_ENV
from dflashops.playbook.models import Playbook
from dflashops.playbook.train import Train
from dflashops.remote import SshConnection
from dflashops.training.dataset import read_samples
from dflashops.training.job import (
    DataSettings,
    DrafterShape,
    TrainingFolder,
    TrainingJob,
    TrainSettings,
)
from dflashops.training.plan import DatasetInfo

_ANY_ADDRESS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class LocalDataset:
    path: Path
    info: DatasetInfo


def train_section(book: Playbook, path: Path) -> Train:
    if book.train is None:
        raise PlaybookError(
            "the playbook has no train: section",
            source=str(path),
            key="train",
            hint="add one (docs/training.md); `playbook show` prints the result",
        )
    return book.train


def read_local_dataset(book: Playbook, book_path: Path) -> LocalDataset | None:
    """The local dataset, validated (None when the dataset is already in the container).

    A relative path is relative to the playbook's folder."""
    train = train_section(book, book_path)
    if train.dataset.source != "local":
        return None
    path = Path(train.dataset.path).expanduser()
    if not path.is_absolute():
        path = book_path.parent / path
    samples = read_samples(path)  # ConfigError naming file:line on the first bad line
    data = path.read_bytes()
    lines = sum(1 for line in data.splitlines() if line.strip())
    limit = train.data.max_samples
    return LocalDataset(
        path,
        DatasetInfo(
            source="local",
            path=str(path),
            lines=lines,
            bytes=len(data),
            samples=min(len(samples), limit) if limit else len(samples),
            sha256=hashlib.sha256(data).hexdigest(),
        ),
    )


def container_dataset(conn: SshConnection, book: Playbook, path: Path) -> DatasetInfo:
    """A dataset already in the container: its non-blank lines and bytes (the data stage
    validates its content)."""
    train = train_section(book, path)
    where = train.dataset.path
    q = shlex.quote(where)
    result = conn.run(
        f"test -f {q} || exit 3; grep -c . {q}; wc -c < {q}",
        ok_codes=None,
        display=f"count {where}",
    )
    numbers = result.stdout.split()
    if result.exit_code == 3 or len(numbers) != 2 or not all(n.isdigit() for n in numbers):
        raise ConfigError(
            f"no dataset file {where} in container {conn.name}",
            source=str(path),
            key="train.dataset.path",
        )
    lines, size = (int(n) for n in numbers)
    limit = train.data.max_samples
    return DatasetInfo(
        source="container",
        path=where,
        lines=lines,
        bytes=size,
        samples=min(lines, limit) if limit else lines,
        sha256=None,
    )


def server_url_in_container(book: Playbook, manifest: DeployedManifest | None) -> str:
    """The server as the data stage reaches it from inside the container: loopback when it
    listens on every address."""
    host = manifest.host if manifest else book.server.host
    port = manifest.port if manifest else book.server.port
    if host in _ANY_ADDRESS:
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def build_job(
    book: Playbook,
    book_path: Path,
    *,
    shape: DrafterShape,
    manifest: DeployedManifest | None,
    layout: Layout,
) -> TrainingJob:
    """The job file for this run (the same one every rerun writes, unless the playbook changed)."""
    train = train_section(book, book_path)
    folder = layout.training_run(book.train_run_name)
    keyed = (manifest.api_key_env if manifest else None) or book.server.api_key_env
    local = train.dataset.source == "local"
    dataset = TrainingFolder(folder).dataset if local else train.dataset.path
    return TrainingJob(
        name=book.train_run_name,
        folder=folder,
        target=str(book.model.path),
        dataset=dataset,
        data=DataSettings(
            base_url=server_url_in_container(book, manifest),
            served_model=manifest.served_model_name if manifest else book.served_name,
            # launch writes the key into secrets.env under this name; the stage sources it
            api_key_env=VLLM_API_KEY_ENV if keyed else None,
            temperature=train.data.temperature,
            thinking=train.data.thinking,
            max_tokens=train.data.max_tokens,
            concurrency=train.data.concurrency,
            max_samples=train.data.max_samples,
        ),
        drafter=shape,
        train=TrainSettings(
            epochs=train.steps.epochs,
            max_steps=train.steps.max_steps,
            lr=train.steps.lr,
            seq_len=train.steps.seq_len,
            checkpoint_every=train.steps.checkpoint_every,
            seed=train.steps.seed,
            device="cpu" if book.server.device == "cpu" else "auto",
        ),
    )
