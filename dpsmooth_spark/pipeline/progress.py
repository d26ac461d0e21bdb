"""Stage-by-stage progress lines on stderr (rich), with each stage's wall time recorded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console


class StageLog:
    """Prints ``[stage] name ... seconds`` lines and keeps the timings for the manifest."""

    def __init__(self, quiet: bool = False) -> None:
        self.console = Console(stderr=True, quiet=quiet, highlight=False)
        self.loud = Console(stderr=True, highlight=False)
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time one stage; the line is printed when it ends (or fails)."""
        start = time.perf_counter()
        self.console.print(f"[bold cyan]>[/] {name} ...")
        try:
            yield
        except BaseException:
            self.console.print(
                f"[bold red]x[/] {name} failed after {time.perf_counter() - start:.2f} s"
            )
            raise
        elapsed = time.perf_counter() - start
        self.timings[name] = self.timings.get(name, 0.0) + elapsed
        self.console.print(f"[bold green]✓[/] {name} [dim]{elapsed:.2f} s[/]")

    def note(self, message: str) -> None:
        """A line of context (public information only)."""
        self.console.print(f"  {message}")

    def warning(self, message: str) -> None:
        """A warning the operator must see (printed even when quiet)."""
        self.loud.print(f"[bold yellow]warning:[/] {message}")
