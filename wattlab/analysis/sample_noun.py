"""What a report's samples are: "image" only when every ok run trained on images (one of
wattlab's image datasets, or a Hugging Face vision model's config); else "sample" (a text
model's tokens or sentences are not images, and a command's or a callback's task is not known).
A report of samples says "samples" wherever an image report says "images"."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from wattlab.analysis.report_document import Block, Bullets, Heading, Para, Table
from wattlab.analysis.runs_table import ok_runs

IMAGE_DATASETS = ("synthetic", "cifar10")  # wattlab.train.config.NUM_CLASSES: both images
VISION_KEYS = ("image_size", "num_channels")  # a Hugging Face vision model's config holds these
_IMAGE_WORD = re.compile(r"\b([Ii])mage(s?)\b")


def _config(cell: object) -> dict[str, Any]:
    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except ValueError:
            return {}
    return cell if isinstance(cell, dict) else {}


def _is_image_run(dataset: object, config_cell: object) -> bool:
    if isinstance(dataset, str) and dataset in IMAGE_DATASETS:
        return True
    model_config = _config(config_cell).get("model_config")
    return isinstance(model_config, dict) and any(k in model_config for k in VISION_KEYS)


def sample_noun(runs: pd.DataFrame) -> str:
    """ "image" when every ok run trained on images, else "sample"."""
    ok = ok_runs(runs)
    if ok.empty:
        return "image"
    datasets = ok["dataset"] if "dataset" in ok.columns else pd.Series([None] * len(ok))
    configs = ok["config_json"] if "config_json" in ok.columns else pd.Series([None] * len(ok))
    images = all(_is_image_run(d, c) for d, c in zip(datasets, configs, strict=True))
    return "image" if images else "sample"


def in_samples(text: str) -> str:
    """``text`` with "image(s)" said as "sample(s)" (the case of the first letter kept)."""
    return _IMAGE_WORD.sub(lambda m: f"{'S' if m.group(1) == 'I' else 's'}ample{m.group(2)}", text)


def blocks_in_samples(blocks: Sequence[Block]) -> list[Block]:
    """The report's blocks with every "image" said as "sample" (figures are drawn apart)."""
    out: list[Block] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(Heading(in_samples(block.text), block.level))
        elif isinstance(block, Para):
            out.append(Para(in_samples(block.text), block.warning, block.lead))
        elif isinstance(block, Bullets):
            out.append(Bullets([in_samples(i) for i in block.items]))
        elif isinstance(block, Table):
            rows = [[in_samples(str(cell)) for cell in row] for row in block.rows]
            note = in_samples(block.note) if block.note is not None else None
            out.append(Table([in_samples(h) for h in block.headers], rows, note))
        else:
            out.append(block)
    return out
