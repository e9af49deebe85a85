"""``drafter train NAME``: the one core call (facts → plan → apply).

1. the playbook's ``train:`` section; a local dataset is read strictly before anything else
   (a bad line: one-line error naming ``file:line``, exit 2);
2. facts: the run folder in the container (:mod:`.facts`), the server, the target's config and
   tokenizer (copied here), the registry entry; the drafter's shape (:mod:`.shape`) and the job;
3. the plan (:mod:`.plan`); ``--dry-run`` returns it here, having changed nothing;
4. apply: the dataset pushed atomically, ``job.json`` written, the engine venv with this
   dflashops and ``speculators`` made ready, then each unfinished stage run in the container
   (:mod:`.remote`) with the server up for the data stage and stopped before the first GPU stage
   (:mod:`.server`); then ``drafter check`` of the export against the target (errors stop here,
   exit 4) and the provenance and loss log copied here;
5. the server that ran before is restarted (also after a failure), unless ``--evaluate``
   (:mod:`.evaluate`) or ``--promote`` (:mod:`.promote`) launch what follows.
"""

from __future__ import annotations

import json
import shlex
import tempfile
import time
from collections.abc import Mapping
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from dflashops.deployment.access import ContainerAccess, connect
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.lock import container_lock
from dflashops.deployment.playbooks import playbook_for_container
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.fetch import fetch_model_meta
from dflashops.drafter.files import TargetFiles, read_drafter, read_target
from dflashops.drafter.keys import is_int
from dflashops.drafter.registry import RegistryEntry, load_registry
from dflashops.drafter.validate import validate_drafter
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import local_wheel
from dflashops.errors import DflashopsError, DrafterError
from dflashops.inventory.load import Inventory
from dflashops.launch.control import stop_server
from dflashops.launch.core import launch
from dflashops.launch.render import venv_python
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.remote import SshConnection, get_bytes, put_atomic
from dflashops.training import packages
from dflashops.training.evaluate import Evaluator
from dflashops.training.facts import ContainerFacts, probe
from dflashops.training.inputs import (
    build_job,
    container_dataset,
    read_local_dataset,
    train_section,
)
from dflashops.training.job import GPU_STAGES, TrainingFolder
from dflashops.training.outcome import (
    METRICS_FILE,
    PROVENANCE_FILE,
    CheckOutcome,
    ExportCheckFailed,
    TrainOutcome,
)
from dflashops.training.plan import TargetSize, TrainPlan, make_plan
from dflashops.training.promote import Promotion, write_promoted
from dflashops.training.registry_fields import registry_fields, write_registry_fields
from dflashops.training.remote import run_remote_stage
from dflashops.training.request import TrainRequest
from dflashops.training.server import TrainingServer
from dflashops.training.shape import registry_entry_for, resolve_shape

PIP_DEADLINE_S = 1800.0
MAX_COPY_BYTES = 256 * 2**20


def train_drafter(
    inventory: Inventory,
    request: TrainRequest,
    *,
    say: Say = quiet,
    environ: Mapping[str, str] | None = None,
    layout: Layout = DEFAULT_LAYOUT,
) -> TrainOutcome:
    """Plan (and unless ``request.dry_run``, run) one training job in ``request.container``."""
    started = time.monotonic()
    book_path = playbook_for_container(request.container, request.playbook)
    book = load_playbook(book_path)
    train = train_section(book, book_path)
    local = read_local_dataset(book, book_path)  # before anything touches the container
    out_dir = request.out_dir(book.train_run_name)
    # one connection serves the whole run, the server's launches and stops included
    access = connect(inventory, request.container)
    with ExitStack() as stack:
        conn = stack.enter_context(access)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="dflashops-train-"))
        if not request.dry_run:  # one writer per container: held for the whole run
            stack.enter_context(
                container_lock(conn, request.container, "drafter train", wait_s=request.wait_s)
            )
        python = venv_python(book, layout)
        folder = TrainingFolder(layout.training_run(book.train_run_name))
        say(f"reading run {book.train_run_name} in {request.container}")
        facts = probe(conn, folder, python, layout)
        target = _fetch_target(conn, book, Path(tmp) / "target")
        entry = registry_entry_for(book, load_registry())
        shape = resolve_shape(train.drafter, entry, target, k=book.server.num_speculative_tokens)
        dataset = local.info if local else container_dataset(conn, book, book_path)
        job = build_job(
            book, book_path, shape=shape.to_job(), manifest=facts.manifest, layout=layout
        )
        plan = make_plan(
            container=request.container,
            job=job,
            shape=shape,
            dataset=dataset,
            facts=facts,
            target=_target_size(target),
            out_dir=out_dir,
            evaluate=request.evaluate,
            promote=request.promote,
        )
        outcome = TrainOutcome(plan=plan, out_dir=out_dir, dry_run=request.dry_run)
        if request.dry_run:
            return outcome
        run = _Run(
            inventory,
            request,
            access=access,
            book=book,
            book_path=book_path,
            conn=conn,
            plan=plan,
            facts=facts,
            say=say,
            environ=environ,
            layout=layout,
        )
        run.apply(outcome, local.path if local else None, target, entry, Path(tmp))
    outcome.seconds = time.monotonic() - started
    outcome.save()
    return outcome


def _fetch_target(conn: SshConnection, book: Playbook, local: Path) -> TargetFiles:
    fetch_model_meta(conn, str(book.model.path), local, weights=False)
    return read_target(str(local))


def _target_size(target: TargetFiles) -> TargetSize:
    hidden, layers = target.text_value("hidden_size"), target.text_value("num_hidden_layers")
    if not is_int(hidden) or not is_int(layers):
        raise DrafterError(
            f"{target.path}: the target's config has no hidden_size/num_hidden_layers"
        )
    return TargetSize(hidden_size=int(hidden), num_layers=int(layers))


class _Run:
    """The apply half of one run."""

    def __init__(
        self,
        inventory: Inventory,
        request: TrainRequest,
        *,
        access: ContainerAccess,
        book: Playbook,
        book_path: Path,
        conn: SshConnection,
        plan: TrainPlan,
        facts: ContainerFacts,
        say: Say,
        environ: Mapping[str, str] | None,
        layout: Layout,
    ) -> None:
        self.inventory = inventory
        self.layout = layout
        self.request = request
        self.book = book
        self.book_path = book_path
        self.access = access
        self.conn = conn
        self.plan = plan
        self.job = plan.job
        self.say = say
        self.python = venv_python(book, layout)
        self.server = TrainingServer(
            inventory,
            access,
            book,
            running=facts.server_running,
            manifest=facts.manifest,
            say=say,
            environ=environ,
        )

    def apply(
        self,
        outcome: TrainOutcome,
        dataset: Path | None,
        target: TargetFiles,
        entry: RegistryEntry | None,
        tmp: Path,
    ) -> None:
        self._write_job(dataset)
        self._ensure_venv()
        try:
            for stage in self.plan.to_run:
                if stage == "data":
                    self.server.serve_for_data()
                if stage in GPU_STAGES:
                    self.server.stop_for(stage)
                outcome.summaries[stage] = run_remote_stage(
                    self.conn,
                    self.job,
                    stage,
                    self.python,
                    container=self.request.container,
                    env=self.book.server.env,
                    secrets=self.layout.secrets,
                    say=self.say,
                )
                outcome.ran.append(stage)
            self._copy_back(outcome)
            outcome.check = self._check_export(target, entry, tmp / "export")
        except BaseException:
            self.server.restore("the run stopped; what it finished is kept")
            outcome.server = self.server.log
            raise
        self._after(outcome)
        outcome.server = self.server.log
        self._registry_fields(outcome)

    def _registry_fields(self, outcome: TrainOutcome) -> None:
        """The trained drafter's ``trained_for`` and ``expected_acceptance`` registry fields
        (``doctor`` compares a live server with them), next to the report."""
        bench = self.book.bench
        fields = registry_fields(
            outcome.provenance,
            outcome.evaluation,
            provenance_file=outcome.local_files.get("provenance", PROVENANCE_FILE),
            workload=bench.workload,
            engine=f"{self.book.engine.name}=={self.book.engine.version}",
            temperature=bench.temperature,
            thinking=bench.thinking,
        )
        written = write_registry_fields(outcome.out_dir, fields)
        if written is not None:
            outcome.local_files["registry_fields"] = written

    def _write_job(self, dataset: Path | None) -> None:
        paths = self.job.paths
        if dataset is not None and self.plan.push_dataset:
            self.say(f"pushing {dataset} to {paths.dataset}")
            put_atomic(self.conn, dataset, paths.dataset, mode=0o600)
        put_atomic(self.conn, self.job.to_json().encode(), paths.job, mode=0o600)

    def _ensure_venv(self) -> None:
        self.say("checking the engine venv (dflashops and speculators)")
        wanted = engine_venv.VenvWanted(self.book.engine, local_wheel(), self.layout)
        engine_venv.ensure(self.conn, wanted)
        probe_cmd = f"{shlex.quote(self.python)} -c {shlex.quote(packages.PROBE)}"
        if self.conn.probe(probe_cmd).exit_code == 0:
            return
        self.say(f"installing speculators {packages.SPECULATORS_VERSION} in the engine venv")
        for command in packages.pip_commands(self.python):
            self.conn.run(shlex.join(command), deadline=PIP_DEADLINE_S, display="pip install")
        check = self.conn.probe(probe_cmd)
        if check.exit_code != 0:
            raise DflashopsError(
                f"speculators {packages.SPECULATORS_VERSION} does not import in {self.python} "
                f"after installing it: {(check.stderr or check.stdout).strip()[-300:]}",
            )

    def _copy_back(self, outcome: TrainOutcome) -> None:
        """The provenance and the loss log, copied next to the report here."""
        out = outcome.out_dir
        out.mkdir(parents=True, exist_ok=True)
        paths = self.job.paths
        for what, remote, name in (
            ("provenance", paths.provenance, PROVENANCE_FILE),
            ("metrics", paths.metrics, METRICS_FILE),
        ):
            if self.conn.probe(f"test -f {shlex.quote(remote)}").exit_code != 0:
                continue
            local = out / name
            local.write_bytes(get_bytes(self.conn, remote, max_bytes=MAX_COPY_BYTES))
            outcome.local_files[what] = str(local)
        if "provenance" in outcome.local_files:
            outcome.provenance = json.loads(Path(outcome.local_files["provenance"]).read_text())

    def _check_export(
        self, target: TargetFiles, entry: RegistryEntry | None, local: Path
    ) -> CheckOutcome:
        """``drafter check`` of the export against the target; errors stop the run (exit 4)."""
        self.say(f"drafter check of {self.job.paths.export} against the target")
        fetch_model_meta(self.conn, self.job.paths.export, local, weights=True)
        files = read_drafter(str(local))
        engine = parse_engine(f"{self.book.engine.name}=={self.book.engine.version}")
        k = self.book.server.num_speculative_tokens
        result = validate_drafter(files, target, None, engine=engine, k=k)
        lines = [
            f"{f.severity}: {f.key}: expected {f.expected}, found {f.found}"
            for f in result.findings
        ]
        errors = [line for line in lines if line.startswith("error")]
        if errors:
            raise ExportCheckFailed(self.job.paths.export, errors)
        conflicts: tuple[str, ...] = ()
        if entry is not None:
            against = validate_drafter(files, target, entry, engine=engine, k=k)
            conflicts = tuple(sorted(against.keys("error") - result.keys("error")))
        status = "warnings" if result.summary.warnings else "clean"
        return CheckOutcome(status, tuple(lines), conflicts)

    def _trained_book(self, drafter_dir: str, check: CheckOutcome) -> Playbook:
        """The playbook serving the trained drafter (in memory, for the evaluation)."""
        model = self.book.drafter.model
        assert model is not None  # a dflash playbook has one; see _promote for the others
        drafter = self.book.drafter.model_copy(
            update={
                "model": model.model_copy(update={"path": Path(drafter_dir)}),
                "ref": None if check.ref_conflicts else self.book.drafter.ref,
            }
        )
        return self.book.model_copy(update={"drafter": drafter})

    def _after(self, outcome: TrainOutcome) -> None:
        """Evaluate, promote, or put the previous server back."""
        assert outcome.check is not None
        promoted = self._promote(outcome) if self.request.promote else None
        trained = promoted
        if trained is None and self.book.drafter.method == "dflash":
            trained = self._trained_book(self.job.paths.export, outcome.check)
        if self.request.evaluate and trained is not None:
            evaluator = Evaluator(self.inventory, self.access, outcome.out_dir, self.say)
            outcome.evaluation = evaluator.run(
                self.book if self.server.was_running else None,
                trained,
                restore=lambda: self._after_evaluation(promoted),
            )
            return
        if self.request.evaluate:
            self.server.log.append(
                "evaluation skipped: the playbook serves no DFlash drafter (add --promote)"
            )
        if promoted is not None:
            self._launch(promoted, f"the promoted playbook {outcome.promoted}")
        else:
            self.server.restore("training finished")

    def _launch(self, book: Playbook, what: str) -> None:
        self.say(f"launching {what}")
        launch(self.inventory, self.request.container, book, progress=self.say, access=self.access)
        self.server.log.append(f"launched {what}")

    def _after_evaluation(self, promoted: Playbook | None) -> None:
        """Serve what the run leaves behind: the promoted playbook, else the given one as it
        was (running or stopped)."""
        if promoted is not None:
            self._launch(promoted, "the promoted playbook")
        elif self.server.was_running:
            self._launch(self.book, "the given playbook again")
        else:
            self.say(f"stopping the server in {self.request.container} (it was not running)")
            stop_server(self.inventory, self.request.container, access=self.access)
            self.server.log.append("evaluated, then stopped the server as it was before")

    def _promote(self, outcome: TrainOutcome) -> Playbook:
        """A stable copy of the export, and the new playbook serving it."""
        assert outcome.check is not None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        copy = f"{self.job.folder}/promoted/{stamp}"
        q = shlex.quote
        self.conn.run(
            f"mkdir -p {q(copy)}.tmp && cp -r {q(self.job.paths.export)}/. {q(copy)}.tmp/ "
            f"&& mv {q(copy)}.tmp {q(copy)}",
            display=f"copy the export to {copy}",
        )
        path, promoted = write_promoted(
            self.book_path,
            self.book,
            Promotion(
                drafter_dir=copy,
                block_size=self.job.drafter.block_size,
                ref_conflicts=outcome.check.ref_conflicts,
                run=self.job.name,
            ),
        )
        outcome.promoted = str(path)
        self.say(f"promoted: {path} serves {copy}")
        return promoted
