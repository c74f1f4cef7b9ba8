"""The summary that ends every run: what was learned, how fast, and where it was saved."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

SUMMARY_FILE = "summary.json"


@dataclasses.dataclass
class RunSummary:
    """Final figures of one run (written to ``<run_dir>/summary.json`` and printed).

    Attributes:
        eval_return: Final ``eval/return_mean`` (training object set); ``None`` if not evaluated.
        eval_ood_return: Final ``eval_ood/return_mean`` (held-out ``test`` set).
        generalization_gap: ``eval_return - eval_ood_return``.
        env_steps: Environment steps taken over all ranks (a resumed run: both parts).
        wall_seconds: Wall time of this ``fit``.
        env_steps_per_second: The steps this ``fit`` took (``env_steps - resumed_from_env_steps``)
            over ``wall_seconds``: a resumed run's earlier steps are not divided by this part's time.
        checkpoint: Path of the last checkpoint (``None`` when checkpointing is off).
        tested_checkpoint: The checkpoint the final evaluation loaded (``best.ckpt`` with
            ``test_ckpt=best``); ``None``: the final weights.
        run_dir: The run directory.
        seed: The run's seed.
        resumed_from_env_steps: The env steps of the checkpoint this fit resumed from (0: a fresh run).
        eval_success_rate: Final ``eval/success_rate`` where the env reports success (``info["is_success"]``).
        eval_ood_success_rate: Final ``eval_ood/success_rate``, likewise.
        total_timesteps: The budget the fit ran to (``algo.total_timesteps``; a trainer limit may end it earlier): a
            sweep rerun with ``ckpt_path=last`` skips a job whose summary has the rerun's budget or a larger one.
    """

    eval_return: float | None
    eval_ood_return: float | None
    generalization_gap: float | None
    env_steps: int
    wall_seconds: float
    env_steps_per_second: float
    checkpoint: str | None
    run_dir: str
    tested_checkpoint: str | None = None
    seed: int | None = None
    resumed_from_env_steps: int = 0
    eval_success_rate: float | None = None
    eval_ood_success_rate: float | None = None
    total_timesteps: int | None = None

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any], **fields: Any) -> RunSummary:
        """Build from final evaluation metrics (``trainer.test`` results or callback metrics)."""

        def get(key: str) -> float | None:
            value = metrics.get(key)
            return None if value is None else float(value)

        return cls(
            eval_return=get("eval/return_mean"),
            eval_ood_return=get("eval_ood/return_mean"),
            generalization_gap=get("eval_ood/generalization_gap"),
            eval_success_rate=get("eval/success_rate"),
            eval_ood_success_rate=get("eval_ood/success_rate"),
            **fields,
        )

    def write(self) -> str:
        """Write ``summary.json`` into the run directory; returns its path."""
        path = os.path.join(self.run_dir, SUMMARY_FILE)
        with open(path, "w") as f:
            json.dump(dataclasses.asdict(self), f, indent=2)
        return path

    def __str__(self) -> str:
        def num(value: float | None) -> str:
            return "not evaluated" if value is None else f"{value:.2f}"

        resumed = self.resumed_from_env_steps
        since = f" (the {self.env_steps - resumed:,} steps since the resume at {resumed:,})" if resumed else ""
        rates = {
            "eval/success_rate (train set)": self.eval_success_rate,
            "eval_ood/success_rate (test set)": self.eval_ood_success_rate,
        }
        rows = [
            ("eval/return_mean (train set)", num(self.eval_return)),
            ("eval_ood/return_mean (test set)", num(self.eval_ood_return)),
            ("generalization gap", num(self.generalization_gap)),
            *[(name, f"{rate:.2f}") for name, rate in rates.items() if rate is not None],  # where the env reports it
            ("env steps", f"{self.env_steps:,}"),
            ("wall time", f"{self.wall_seconds:.1f} s"),
            ("env steps/s", f"{self.env_steps_per_second:,.0f}{since}"),
            ("evaluated weights", self.tested_checkpoint or "final"),
            ("checkpoint", self.checkpoint or "none"),
            ("run dir", self.run_dir),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(["Run summary:", *(f"  {k:<{width}}  {v}" for k, v in rows)])
