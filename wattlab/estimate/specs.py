"""GPU specifications from the shipped table ``gpu_specs.csv`` (vendor datasheets, dense rates).

``lookup_gpu`` accepts the names people type ("H200", "rtx 3090") and the names NVML reports
("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-80GB"). Matching is on
lower-cased word sets with vendor words (nvidia, tesla, geforce) dropped: an exact alias match
wins; otherwise an alias whose words are all in the name matches when the name's extra words are
only memory size or type ("32gb", "hbm3"). A name that matches nothing, or several entries
equally, raises ConfigError with the closest names and the ``--gpu-tdp`` way out.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from wattlab.errors import ConfigError, DataError

_RATE_COLUMN = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_tflops",
    "amp-bf16": "bf16_tflops",
    "amp-fp16": "fp16_tflops",
}
_VENDOR_WORDS = {"nvidia", "tesla", "geforce"}
_NOISE_WORD = re.compile(r"^(\d+gb|hbm\w*|gddr\w*)$")
_COLUMNS = (
    "name",
    "aliases",
    "tdp_w",
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "fp16_tflops",
    "memory_gb",
    "cuda_cores",
)
_OPTIONAL_COLUMNS = ("memory_bandwidth_gbs",)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. Units: tdp_w in W per GPU; rates in TFLOP/s (dense, no sparsity);
    memory_gb in GB; memory_bandwidth_gbs in GB/s (None when the table has none). A rate of
    None means no tensor-core path for that format."""

    name: str
    aliases: tuple[str, ...]
    tdp_w: float
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    memory_gb: float
    cuda_cores: int
    memory_bandwidth_gbs: float | None = None

    def rate_tflops(self, precision: str) -> float | None:
        """The table's rate for ``precision`` (TFLOP/s), None when the GPU lacks that path."""
        _check_precision(precision)
        return getattr(self, _RATE_COLUMN[precision])

    def supports(self, precision: str) -> bool:
        """True when the table lists a dedicated rate for ``precision``."""
        return self.rate_tflops(precision) is not None


def _check_precision(precision: str) -> None:
    if precision not in _RATE_COLUMN:
        # the one list (train.config), imported only here: it loads pydantic, which the
        # registry of methods, and so every CLI command, would otherwise pay for at start-up
        from wattlab.train.config import PRECISIONS

        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")


def peak_flops(spec: GpuSpec, precision: str) -> float:
    """Peak dense rate of one GPU at ``precision``. Units: FLOP/s.

    A precision the GPU has no tensor-core path for (TF32/BF16 before Ampere, FP16 on Maxwell)
    runs at the FP32 rate, so the FP32 rate is returned; ``spec.supports(precision)`` says which.
    """
    rate = spec.rate_tflops(precision)
    return (rate if rate is not None else spec.fp32_tflops) * 1e12


def _words(name: str) -> frozenset[str]:
    text = re.sub(r"[-_/,()]+", " ", name.lower())
    return frozenset(w for w in text.split() if w not in _VENDOR_WORDS)


def _optional_float(text: str, where: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise DataError(f"{where}: expected a number, got {text!r}.") from None


def parse_gpu_specs(text: str, source: str = "gpu_specs.csv") -> tuple[GpuSpec, ...]:
    """Parse the spec table (``#`` lines are comments). Malformed rows raise DataError."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    fields = tuple(reader.fieldnames or ())
    if fields[: len(_COLUMNS)] != _COLUMNS or fields[len(_COLUMNS) :] not in (
        (),
        _OPTIONAL_COLUMNS,
    ):
        raise DataError(
            f"{source}: the header must be {','.join(_COLUMNS)} "
            f"(optionally followed by {','.join(_OPTIONAL_COLUMNS)})."
        )
    specs = []
    for number, row in enumerate(reader, start=2):
        where = f"{source} row {number}"
        tdp_w = _optional_float(row["tdp_w"], where)
        fp32 = _optional_float(row["fp32_tflops"], where)
        memory = _optional_float(row["memory_gb"], where)
        cores = _optional_float(row["cuda_cores"], where)
        if tdp_w is None or fp32 is None or memory is None or cores is None:
            raise DataError(f"{where}: tdp_w, fp32_tflops, memory_gb and cuda_cores are required.")
        aliases = tuple(a.strip() for a in row["aliases"].split(";") if a.strip())
        specs.append(
            GpuSpec(
                name=row["name"].strip(),
                aliases=aliases,
                tdp_w=tdp_w,
                fp32_tflops=fp32,
                tf32_tflops=_optional_float(row["tf32_tflops"], where),
                bf16_tflops=_optional_float(row["bf16_tflops"], where),
                fp16_tflops=_optional_float(row["fp16_tflops"], where),
                memory_gb=memory,
                cuda_cores=int(cores),
                memory_bandwidth_gbs=_optional_float(row.get("memory_bandwidth_gbs") or "", where),
            )
        )
    return tuple(specs)


def specs_path() -> Path:
    """Where the shipped table lives."""
    return Path(str(resources.files("wattlab.estimate") / "gpu_specs.csv"))


@lru_cache(maxsize=1)
def gpu_specs() -> tuple[GpuSpec, ...]:
    """The shipped table, read once on first use."""
    return parse_gpu_specs(specs_path().read_text(encoding="utf-8"))


def _names(spec: GpuSpec) -> tuple[str, ...]:
    return (spec.name, *spec.aliases)


def name_a_gpu() -> str:
    """What to give as --gpu-name, for a user who has none to name (a machine without a GPU):
    the predictions are for a GPU, and the names the shipped table knows."""
    known = ", ".join(s.name.removeprefix("NVIDIA ") for s in gpu_specs())
    return (
        "the GPU to predict the training on (the predictions are for a GPU, also on a machine "
        f"without one), e.g. --gpu-name H200; known: {known}"
    )


TDP_WAY_OUT = "or give the GPU's maximum power with --gpu-tdp W"
NAME_WAY_OUT = "or give a known GPU with --gpu-name"


def lookup_gpu(
    name: str, specs: tuple[GpuSpec, ...] | None = None, *, way_out: str = TDP_WAY_OUT
) -> GpuSpec:
    """The spec for a GPU name (typed or as NVML reports it); ConfigError when unknown.

    ``way_out`` ends the sentence of an unknown name: the flag the calling command offers
    instead (``--gpu-tdp`` for estimate; ``NAME_WAY_OUT`` for advise, which has no TDP flag)."""
    specs = gpu_specs() if specs is None else specs
    words = _words(name or "")
    if words:
        exact = {s.name: s for s in specs for alias in _names(s) if _words(alias) == words}
        if len(exact) == 1:
            return next(iter(exact.values()))
        best: dict[str, GpuSpec] = {}
        best_size = 0
        for spec in specs:
            for alias in _names(spec):
                alias_words = _words(alias)
                extra = words - alias_words
                if not alias_words <= words or not all(_NOISE_WORD.match(w) for w in extra):
                    continue
                if len(alias_words) > best_size:
                    best, best_size = {spec.name: spec}, len(alias_words)
                elif len(alias_words) == best_size:
                    best[spec.name] = spec
        if len(best) == 1:
            return next(iter(best.values()))
        if len(exact) > 1 or len(best) > 1:
            several = sorted(exact or best)
            raise ConfigError(
                f"GPU name {name!r} matches several entries ({', '.join(several)}); give the "
                f"full name, {way_out}."
            )
    raise ConfigError(
        f"unknown GPU {name!r}{_close_matches_text(name, specs)}; use a name from "
        f"wattlab/estimate/gpu_specs.csv, {way_out}."
    )


def _close_matches_text(name: str, specs: tuple[GpuSpec, ...]) -> str:
    """Entries whose names contain every word given first (all A100s for "A100"), then
    difflib's closest spellings."""
    words = _words(name or "")
    found: list[str] = []
    for spec in specs:
        if words and any(words <= _words(alias) for alias in _names(spec)):
            found.append(spec.name)
    candidates: dict[str, str] = {}
    for spec in specs:
        for alias in _names(spec):
            candidates.setdefault(" ".join(sorted(_words(alias))), spec.name)
            candidates.setdefault(alias.lower(), spec.name)
    for query in ((name or "").lower(), " ".join(sorted(words))):
        for match in difflib.get_close_matches(query, list(candidates), n=6, cutoff=0.5):
            if candidates[match] not in found:
                found.append(candidates[match])
    return f" (close matches: {', '.join(found[:5])})" if found else ""


def known_gpu_names() -> list[str]:
    """Canonical names in the shipped table."""
    return [spec.name for spec in gpu_specs()]
