"""``tune --load`` on the H200 (issue 34): the schedule against every static k, levels 1..32.

For each model (``q8b``: the Qwen3-8B shape; ``q27``: the dense 27B stand-in; both with the
incident's per-position curve as vLLM 0.26.0's ``synthetic_acceptance_rates``), on one H200 with
vLLM 0.26.0 from ``../shared/gpu``'s payload and the bundled server:

1. the product's loop, ``run_load_tune`` (budget 4, levels 1, 2, 4, 8, 16, 32, current k 15:
   issue 22's concurrency-1 k*), each probe a server launch benched at every level with
   ``dflashops bench`` (at least 2 x the level requests, ``--min-requests`` at the least), then
   the schedule's verification launch (refused past 5 % below the best static k the loop
   measured at some level);
2. every static k of ``--static-ks`` (0, 1, 2, 4, 8, 15) the loop did not launch;
3. at every level, what the tuner leaves serving against the best static k measured there
   (≥ 0.97 asked), and the levels where k = 0 is the best.

Every launch costs 2-4 minutes (a server start is 100-230 s on the H200), so a model takes
several device calls: the run keeps its records on the machine (``/root/gpu/load``) and in
``$OUT`` after every launch, stops before a launch that would not fit ``--deadline-s``, and the
next call carries on (``--resume-from`` a returned JSON on a fresh machine).

Subcommands (README.md has the exact ``run`` calls)::

    python benchmarks/gpu_load.py pack --payload .gpu/payload        # here: .gpu/load-a, load-b
    python3 benchmarks/gpu_load.py recv .gpu/load-a --first           # GPU, call 1
    python3 benchmarks/gpu_load.py run --recv .gpu/load-b --model q8b --out $OUT   # GPU, call 2
    python3 benchmarks/gpu_load.py run --model q8b --out $OUT         # GPU, calls 3..
    python benchmarks/gpu_load.py plan --model q8b                    # here: launches, commands
    python benchmarks/gpu_load.py selfcheck                           # here: the fake engine
    python benchmarks/gpu_load.py summary RESULT.json                 # here: the summary again
    python benchmarks/gpu_load.py replay RESULT.json                  # here: today's loop on it
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_load_device as device

T0 = time.monotonic()


def config_of(args: argparse.Namespace) -> Any:
    import gpu_load_core as core

    return core.LoadBenchConfig(
        model=args.model,
        budget=args.budget,
        current_k=args.current_k,
        static_ks=tuple(int(k) for k in args.static_ks.split(",")),
        max_num_seqs=args.max_num_seqs,
        min_requests=args.min_requests,
    )


def cmd_recv(args: argparse.Namespace) -> int:
    device.recv(args.folder, first=args.first)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    deadline = T0 + args.deadline_s
    if args.recv is not None:
        device.recv(args.recv, first=False)
    problem = device.ready()
    if problem:
        print(f"gpu_load: {problem}", file=sys.stderr)
        return 2
    device.kill_leftovers()
    device.import_paths()
    import gpu_load_core as core

    setup = device.MODELS[args.model]
    config = config_of(args)
    store = core.Store.open(
        device.STATE / setup.name / "store.json",
        args.resume_from,
        retry_failed=args.retry_failed,
    )
    server = device.DeviceServer(
        setup,
        max_num_seqs=config.max_num_seqs,
        groups=core.level_groups(core.requests_per_level(config.levels, config.min_requests)),
        deadline=deadline,
        out_of_time=core.OutOfTime,
    )
    facts = device.facts()

    def save(result: core.Record) -> list[Path]:
        result.update(title=setup.title, facts=facts, max_tokens=setup.max_tokens)
        return device.save_out(args.out, setup, result, core.summary_text(result, setup.title))

    bench = core.LoadBench(
        config, store, server.serve, server.check_time, device.log, after_record=save
    )
    result = bench.run()
    written = save(result)
    summary = core.summary_text(result, setup.title)
    print(summary)
    device.log("wrote", [str(path) for path in written])
    print("DONE" if result["complete"] else "INCOMPLETE: run the same command again")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """The loop as the canned GPU machine steers it, with every spec and command it renders."""
    import gpu_load_core as core
    import gpu_load_selfcheck as selfcheck

    setup = device.MODELS[args.model]
    config = config_of(args)
    serve, _ = selfcheck.canned_gpu()
    groups = core.level_groups(core.requests_per_level(config.levels, config.min_requests))
    book = device.load_book(setup, config.max_num_seqs)
    launches: list[tuple[Any, float]] = []
    history: list[float] = []

    def planned(served: Any) -> core.Record:
        key = core.served_key(served)
        run_dir = device.STATE / setup.name / key
        spec = device.render_spec(
            setup, served, max_num_seqs=config.max_num_seqs, run_dir=run_dir,
            models_root=args.models,
        )  # fmt: skip
        start = setup.start_warm_s if history else setup.start_cold_s
        bench_s = setup.bench_plain_s if served == 0 else setup.bench_spec_s
        need = start + bench_s + device.STOP_S
        history.append(need)
        launches.append((served, need))
        print(f"\nlaunch {len(launches)}: {core.describe(served)}   (~{need:.0f} s: start "
              f"{start:.0f}, levels {bench_s:.0f}, stop {device.STOP_S:.0f})")  # fmt: skip
        print(f"  {' '.join(device.server_argv(run_dir / 'spec.json', 'python3'))}")
        print(f"    spec env: {json.dumps(spec['env'], sort_keys=True)}")
        print(f"    exec: {' '.join(spec['argv'])}")
        for levels, n in groups:
            argv = device.bench_argv(
                setup, k=core.max_k(served), label=f"{setup.name} {key}", levels=levels,
                requests=n, port=book.server.port, served_name=book.served_name,
                weights=device.weights_arg(setup), out_json=device.bench_out(run_dir, levels),
                python="python3",
            )  # fmt: skip
            print(f"  {' '.join(argv)}")
        record: core.Record = serve(served)
        return record

    print(f"plan for {setup.name}: {setup.title}")
    print(f"playbook {setup.playbook.relative_to(device.REPO)}, --max-num-seqs "
          f"{config.max_num_seqs}, {setup.max_tokens} tokens a request, requests per level "
          f"{core.requests_per_level(config.levels, config.min_requests)}")  # fmt: skip
    print("the tuner's choices after its first three probes follow the canned GPU machine "
          "(tests/unit/test_tune_load.py): on the H200 they follow what it measures")  # fmt: skip
    if args.models is None:
        print("(no --models: launch's drafter check is skipped, so a required environment "
              "such as VLLM_USE_V2_MODEL_RUNNER=1 for the 27B drafter is not shown)")  # fmt: skip
    bench = core.LoadBench(
        config, core.Store(), planned, lambda served: None, lambda line: print(f"# {line}")
    )
    result = bench.run()
    print("\n" + core.summary_text(result, f"{setup.title} [canned GPU machine, not measured]"))
    calls: list[list[str]] = [[]]
    used = device.RECV_S  # the first run call receives the second chunk
    for served, need in launches:
        if used + need > args.deadline_s:  # as check_time refuses a launch that does not fit
            calls.append([])
            used = 0.0
        calls[-1].append(core.served_key(served))
        used += need
    total = sum(need for _, need in launches) + device.RECV_S
    print(f"{len(launches)} launches, ~{total:.0f} s of device time for this model (estimates "
          f"on the safe side), in run calls of at most {args.deadline_s:.0f} s after the call "
          "that carries the first chunk (a call ends early rather than start a launch that "
          "would not fit):")  # fmt: skip
    for i, keys in enumerate(calls, 2):
        print(f"  call {i}: {', '.join(keys)}")
    return 0


def cmd_selfcheck(_: argparse.Namespace) -> int:
    sys.path.insert(0, str(device.REPO))  # tests.unit: the canned machines
    import gpu_load_selfcheck as selfcheck

    return selfcheck.main()


def cmd_summary(args: argparse.Namespace) -> int:
    import gpu_load_core as core

    result = json.loads(args.result.read_text(encoding="utf-8"))
    print(core.summary_text(result, str(result.get("title", ""))), end="")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """The product's loop again over a returned JSON's records, nothing served: what this
    checkout decides on the numbers a GPU measured (a configuration the records lack ends the
    replay as a run ends out of time)."""
    import gpu_load_core as core

    result = json.loads(args.result.read_text(encoding="utf-8"))
    saved = result["config"]
    engine, version = str(saved["engine"]).split()
    config = core.LoadBenchConfig(
        model=result["model"],
        levels=tuple(saved["levels"]),
        budget=saved["budget"],
        current_k=saved["current_k"],
        static_ks=tuple(saved["static_ks"]),
        max_num_seqs=saved["max_num_seqs"],
        engine=engine,
        version=version,
    )

    def not_here(served: Any) -> None:
        raise core.OutOfTime(served, 0.0, 0.0)

    bench = core.LoadBench(
        config,
        core.Store.open(None, [args.result]),
        lambda served: {},
        not_here,
        lambda line: print(f"# {line}"),
    )
    replayed = bench.run()
    replayed.update(facts=result.get("facts", {}), max_tokens=result.get("max_tokens"))
    title = f"{result.get('title', '')} [replayed here from {args.result.name}]"
    print("\n" + core.summary_text(replayed, title), end="")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    import gpu_load_pack

    return gpu_load_pack.pack(args.payload, args.out)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="here: the two folders the device calls carry")
    pack.add_argument("--payload", type=Path, required=True, help="../shared/gpu/pack.sh WORKDIR")
    pack.add_argument("--out", type=Path, default=device.REPO / ".gpu")
    pack.set_defaults(func=cmd_pack)
    recv = sub.add_parser("recv", help="GPU host: append a carried chunk, unpack what came")
    recv.add_argument("folder", type=Path)
    recv.add_argument("--first", action="store_true", help="start a new blob (the first chunk)")
    recv.set_defaults(func=cmd_recv)
    replay = sub.add_parser(
        "replay", help="here: the product's loop over a result JSON's records, nothing served"
    )
    replay.add_argument("result", type=Path)
    replay.set_defaults(func=cmd_replay)
    for name, func, helptext in (
        ("run", cmd_run, "GPU host: measure one model (resumes where the last call stopped)"),
        ("plan", cmd_plan, "here: the launches and commands, steered by the canned GPU machine"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--model", choices=sorted(device.MODELS), required=True)
        p.add_argument("--deadline-s", type=float, default=560, help="stop launching by then")
        p.add_argument("--budget", type=int, default=4, help="the tuner's launches of one k")
        p.add_argument("--current-k", type=int, default=15, help="the concurrency-1 k")
        p.add_argument("--static-ks", default="0,1,2,4,8,15")
        p.add_argument("--max-num-seqs", type=int, default=64)
        p.add_argument("--min-requests", type=int, default=16, help="per level, at the least")
        p.set_defaults(func=func)
        if name == "run":
            p.add_argument("--out", type=Path, required=True, help="$OUT")
            p.add_argument("--recv", type=Path, help="a carried folder to receive first")
            p.add_argument(
                "--resume-from",
                type=Path,
                action="append",
                default=[],
                help="an earlier result JSON: its records are not measured again",
            )
            p.add_argument("--retry-failed", action="store_true", help="serve failures again")
        else:
            p.add_argument("--models", type=Path, help="model folders for the drafter check")
    check = sub.add_parser("selfcheck", help="here: the driver against the fake engine")
    check.set_defaults(func=cmd_selfcheck)
    summary = sub.add_parser("summary", help="here: the text summary of a result JSON")
    summary.add_argument("result", type=Path)
    summary.set_defaults(func=cmd_summary)
    return ap


def main() -> int:
    args = parser().parse_args()
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
