"""SGLang's import closure as the H200 machine would see it, checked here on the CPU (issue 37).

``PYTHONPATH=SITE PY benchmarks/gpu_sglang_imports.py cpu|h200`` — SITE is the payload's tree
(``gpu_sglang_pack.sh WORKDIR check`` builds it from python 3.11 wheels of the same pins), PY a
python with torch (the lab's vLLM venv: 3.11, torch 2.13 CPU). Only three kinds of top-level module
may be imported: the standard library, what SITE holds, and what the H200 image holds
(KINDS.md's package list, mapped to import names through this venv's metadata, plus a few by hand).
Anything else is refused, recorded with the line that imported it, and replaced by a stub so the
walk goes on: one run lists every missing module, not only the first. A refusal inside a
``try: ... except ImportError`` is an optional import and is listed as such.

``h200`` poses as one H200 (``torch.cuda.is_available()``, capability 9.0, CUDA 13.0) so the
``if is_cuda():`` branches are imported too; ``sgl_kernel`` is stubbed (its libraries need a GPU
and torch 2.11), and what fails for want of a real GPU is reported, not fixed.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any
from unittest import mock

# the modules the server imports at start and on the way to serving a dense Qwen3 with
# EAGLE-3 or DFLASH (the scheduler process imports the model runner and the workers)
MODULES = (
    "sglang.launch_server",
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_loader.loader",
    "sglang.srt.models.qwen3",
    "sglang.srt.models.llama_eagle3",
    "sglang.srt.models.dflash",
    "sglang.srt.layers.sampler",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.flashattention_backend",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.dflash_worker_v2",
    "sglang.srt.speculative.ngram_worker",
    "sglang.srt.constrained.base_grammar_backend",
    "flashinfer.sampling",
)
IMAGE_LIST = Path("/work/.library/device/KINDS.md")
UTIL_FILES = (importlib.util.__file__,)
# image distributions whose import names this venv may not know
IMAGE_IMPORTS = {
    "yaml", "PIL", "zmq", "sklearn", "pynvml", "dateutil", "google", "cv2", "attr", "attrs",
    "cuda", "huggingface_hub", "typing_extensions", "markupsafe", "jinja2", "msgpack", "torch",
    "torchgen", "functorch", "triton", "numpy", "transformers", "tokenizers", "safetensors",
    "sentencepiece", "tiktoken", "scipy", "psutil", "requests", "tqdm", "packaging", "einops",
    "aiohttp", "uvloop", "prometheus_client", "click", "rich", "filelock", "fsspec", "sympy",
    "networkx", "regex", "certifi", "urllib3", "charset_normalizer", "idna", "anyio", "httpx",
    "httpcore", "h11", "sniffio", "pygments", "six", "timm", "torchvision", "torchaudio", "ninja",
    "setuptools", "pkg_resources", "_distutils_hack", "distutils", "wheel", "grpc", "yarl",
    "multidict", "frozenlist", "aiosignal", "aiohappyeyeballs", "propcache", "xxhash", "numba",
    "llvmlite", "pandas", "pyarrow", "mpmath", "annotated_doc", "typer", "shellingham", "hf_xet",
    "cloudpickle", "tabulate", "wrapt", "zipp", "jax", "jaxlib", "cupy", "mpi4py", "lxml",
    "opt_einsum", "ml_dtypes", "pytest", "_pytest", "pluggy", "iniconfig", "sortedcontainers",
}  # fmt: skip


def image_dists() -> set[str]:
    try:
        text = IMAGE_LIST.read_text(encoding="utf-8")
        listed = text.split("Packages: ", 1)[1].split("\n", 1)[0].rstrip(".")
    except (OSError, IndexError):
        return set()
    return {d.strip().lower().replace("_", "-") for d in listed.split(",")}


def image_imports() -> set[str]:
    """Import names of the image's distributions, as far as this venv's metadata knows them."""
    names = set(IMAGE_IMPORTS)
    dists = image_dists()
    for module, owners in importlib.metadata.packages_distributions().items():
        if any(o.lower().replace("_", "-") in dists for o in owners):
            names.add(module)
    return names


def site_imports(site: Path) -> set[str]:
    out = set()
    for entry in site.iterdir():
        if entry.suffix in (".py", ".so") or (entry.is_dir() and "." not in entry.name):
            out.add(entry.name.split(".")[0])
    return out


class Stub(types.ModuleType):
    """A missing module: any attribute is a MagicMock, any submodule another stub."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__version__ = "0"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = mock.MagicMock(name=f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class Recorder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The last finder: every top-level module nothing else found is recorded with the line
    that imported it; the stubbed ones (the image's, and those a failed round needed) load as
    stubs, so the walk goes on."""

    def __init__(self, site: Path, image: set[str], stubbed: set[str]) -> None:
        self.site, self.image, self.stubbed = site, image, stubbed
        self.missing: dict[str, list[tuple[str, bool]]] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        top = name.split(".", maxsplit=1)[0]
        if top in self.stubbed:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if "." in name or probing():
            return None
        where = importer()
        seen = self.missing.setdefault(top, [])
        if len(seen) < 4 and where not in (w for w, _ in seen):
            seen.append((where, guarded(where)))
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return Stub(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class Front(importlib.abc.MetaPathFinder):
    """Serves one package from the recorder's stubs before the path finders see SITE's copy."""

    def __init__(self, top: str, recorder: Recorder) -> None:
        self.top, self.recorder = top, recorder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".", maxsplit=1)[0] == self.top:
            return importlib.machinery.ModuleSpec(name, self.recorder, is_package=True)
        return None


def shadow(image: set[str], out: Path) -> Path:
    """A folder of links to this venv's copies of the image's packages (and their metadata)
    only, so the check runs with ``-S`` and sees nothing else this venv happens to hold."""
    dists = {d.lower().replace("_", "-") for d in image_dists()}
    out.mkdir(parents=True, exist_ok=True)
    for root in (Path(p) for p in sys.path if p.endswith("site-packages")):
        for entry in root.iterdir():
            stem = entry.name.split(".")[0].split("-")[0]
            dist = stem.lower().replace("_", "-")
            meta = entry.suffix in (".dist-info", ".libs") and dist in dists
            if (stem in image or meta) and not (out / entry.name).exists():
                (out / entry.name).symlink_to(entry)
    if not (out / "torchvision").exists():  # the image has 0.26.0; a CPU build here may not
        write_torchvision_shim(out / "torchvision")
    return out


def write_torchvision_shim(root: Path) -> None:
    """A torchvision stand-in: its enums, and any other name a plain function (a MagicMock module
    breaks code that subclasses or serializes what it imports)."""
    rest = (
        "def _missing(*args, **kwargs):\n    raise NotImplementedError('torchvision stand-in')\n"
        "def __getattr__(name):\n"
        "    if name.startswith('__'):\n        raise AttributeError(name)\n"
        "    return _missing\n"
    )
    enums = (
        "import enum\n"
        "class InterpolationMode(enum.Enum):\n"
        "    NEAREST = 'nearest'\n    NEAREST_EXACT = 'nearest-exact'\n"
        "    BILINEAR = 'bilinear'\n    BICUBIC = 'bicubic'\n    BOX = 'box'\n"
        "    HAMMING = 'hamming'\n    LANCZOS = 'lanczos'\n"
        "class ImageReadMode(enum.Enum):\n    UNCHANGED = 0\n    GRAY = 1\n    RGB = 3\n"
    )
    files = {
        "__init__.py": '__version__ = "0.26.0"\n' + rest + "from . import io, transforms  # noqa\n",
        "_enums.py": enums,
        "io.py": "from ._enums import ImageReadMode  # noqa\n" + rest,
        "transforms/__init__.py": "from .._enums import InterpolationMode  # noqa\n"
        + rest
        + "from . import functional, v2  # noqa\n",
        "transforms/functional.py": "from .._enums import InterpolationMode  # noqa\n" + rest,
        "transforms/v2/__init__.py": rest + "from . import functional  # noqa\n",
        "transforms/v2/functional.py": rest,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def shorten(path: str, site: Path) -> str:
    return path.removeprefix(f"{site}/")


def probing() -> bool:
    """Whether this lookup is ``importlib.util.find_spec`` asking, not an import."""
    return any(
        f.name == "find_spec" and f.filename in ("<frozen importlib.util>", *UTIL_FILES)
        for f in traceback.extract_stack()
    )


def importer() -> str:
    """file:line of the first frame outside importlib and this file."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if "importlib" in frame.filename or frame.filename == __file__:
            continue
        return f"{frame.filename}:{frame.lineno}"
    return "?"


def guarded(where: str) -> bool:
    """Whether the import at ``where`` sits in a ``try`` or ``except`` block, at any depth (read
    back from the file), so that an ImportError there is handled."""
    path, _, line = where.rpartition(":")
    file = Path(path)
    if not file.is_file():
        return False
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    indent = len(lines[int(line) - 1]) - len(lines[int(line) - 1].lstrip())
    for text in reversed(lines[: int(line) - 1]):
        stripped = text.lstrip()
        if not stripped or stripped.startswith("#") or len(text) - len(stripped) >= indent:
            continue
        if stripped.startswith(("try:", "except")):
            return True
        indent = len(text) - len(stripped)
        if indent == 0:
            return False
    return False


def pose_as_h200() -> None:
    import torch

    props = types.SimpleNamespace(
        major=9, minor=0, name="NVIDIA H200", total_memory=143771 * 2**20,
        multi_processor_count=132, L2_cache_size=60 * 2**20, warp_size=32,
    )  # fmt: skip
    torch.cuda.is_available = lambda: True
    torch.version.cuda = "13.0"
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_name = lambda device=None: "NVIDIA H200"
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    site = next(Path(p) for p in sys.path if p and (Path(p) / "sglang").is_dir())
    if not os.environ.get("GPU_SGLANG_IMPORTS_CHILD"):  # again, isolated: -S, the image only
        links = shadow(image_imports(), Path(tempfile.mkdtemp(prefix="image-")))
        # PYTHONPATH keeps its order (SITE, then stand-ins for image packages in the image's own
        # versions where this venv's differ), then the links
        path = os.environ.get("PYTHONPATH", str(site))
        env = dict(os.environ, GPU_SGLANG_IMPORTS_CHILD="1", PYTHONPATH=f"{path}:{links}")
        return subprocess.run(
            [sys.executable, "-S", __file__, mode], env=env, check=False
        ).returncode
    recorder = Recorder(site, image_imports(), {"sgl_kernel"} if mode == "h200" else set())
    sys.meta_path.append(recorder)
    if mode == "h200":  # its libraries need a GPU and torch 2.11: a stand-in, ahead of SITE
        sys.meta_path.insert(0, Front("sgl_kernel", recorder))
    if mode == "h200":
        pose_as_h200()
        if os.environ.get("CUDART"):  # flashinfer.comm asserts libcudart is loaded, as torch does
            ctypes.CDLL(os.environ["CUDART"], mode=ctypes.RTLD_GLOBAL)
    failures: dict[str, str] = {}
    for name in MODULES:
        for _ in range(40):  # each failed round stubs the modules it missed
            try:
                importlib.import_module(name)
                break
            except Exception as exc:
                for mod in [m for m in sys.modules if m.split(".")[0] in ("sglang", "flashinfer")]:
                    del sys.modules[mod]  # a clean start: no half-initialized packages
                # stub only the module whose absence actually stopped the import (an import
                # guarded by a caller's try never gets here); then try again for the next one
                new = set()
                cause: BaseException | None = exc
                while cause is not None:
                    if isinstance(cause, ModuleNotFoundError) and cause.name:
                        new.add(cause.name.split(".", maxsplit=1)[0])
                    cause = cause.__cause__ or cause.__context__
                new &= set(recorder.missing)
                new -= recorder.stubbed
                if not new:
                    frames = traceback.extract_tb(exc.__traceback__)
                    ours = [f for f in frames if f.filename.startswith(str(site))][-3:][::-1]
                    trail = " <- ".join(
                        f"{shorten(f.filename, site)}:{f.lineno}" for f in ours[::-1]
                    )
                    failures[name] = f"{type(exc).__name__}: {exc}"[:240] + f" [{trail}]"
                    break
                recorder.stubbed |= new
    print(f"== {mode}: {len(MODULES) - len(failures)}/{len(MODULES)} modules imported")
    for top, seen in sorted(recorder.missing.items()):
        if top in recorder.stubbed:
            kind = "STOPPED AN IMPORT"
        elif top in recorder.image:
            kind = "in the image"
        elif not any(w.startswith(str(site)) for w, _ in seen):
            kind = "(image pkg's)"
        else:
            kind = "optional (in try)" if all(g for _, g in seen) else "guarded upstream"
        stub = " (stand-in)" if top in recorder.stubbed else ""
        places = ", ".join(w.removeprefix(f"{site}/") for w, _ in seen)
        print(f"  missing {top:24s} {kind:17s}{stub} at {places}")
    for name, why in failures.items():
        print(f"  failed  {name}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
