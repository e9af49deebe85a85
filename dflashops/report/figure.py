"""What every PNG plot shares: matplotlib on its file-only backend, and one way to save."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def use_file_backend() -> None:
    """Agg: plots go to files, and no display is needed (CI, SSH sessions)."""
    import matplotlib

    matplotlib.use("Agg")


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out, write as PNG and free ``fig`` (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
