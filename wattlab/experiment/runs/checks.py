"""The checks of one run, before anything is set or written: the configuration (budget, model,
dataset, CodeCarbon) needs no database and no GPU, so sweeps run it for every planned run
before they start; ``preflight`` adds the database and the GPUs for a run about to start. Each
refuses bad input in one sentence (a ConfigError or a missing extra)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from wattlab.errors import ConfigError
from wattlab.extras import MissingExtraError, missing_sentence, require
from wattlab.processes import usable_cores
from wattlab.train.config import RunConfig


def check_devices(cfg: RunConfig) -> None:
    """Refuse a configuration this machine cannot run, in one sentence."""
    if cfg.device == "cpu" and cfg.cpu_threads is not None and cfg.cpu_threads > usable_cores():
        cores = usable_cores()
        raise ConfigError(
            f"--cpu-threads {cfg.cpu_threads} asks for more threads than the {cores} CPU "
            f"core(s) this process may use here; give at most {cores}."
        )
    if cfg.device != "cuda":
        return
    torch = require("torch", "train", "--device cuda", instead="use --device cpu")
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if available == 0:
        raise ConfigError("no CUDA GPU is visible here; use --device cpu (or check the driver).")
    if cfg.gpus > available:
        raise ConfigError(
            f"--gpus {cfg.gpus} asks for more GPUs than the {available} visible here."
        )


def check_dataset(cfg: RunConfig, *, open_files: bool = True) -> None:
    """A CIFAR-10 folder must hold every batch file, and every batch must parse as plain data
    of the right shape (a hostile pickle is refused, never run). ``open_files=False`` (a dry
    run) checks the files' presence and size without opening any of them."""
    if cfg.dataset != "cifar10":
        return
    from wattlab.train.data import check_cifar10_dir

    check_cifar10_dir(cfg.data_dir or "", open_files=open_files)


def check_budget(cfg: RunConfig) -> None:
    """The batch must fit the training set, and the budget must hold at least one batch."""
    from wattlab.train.config import budget_steps, train_set_size

    budget_steps(cfg, train_set_size(cfg))


def check_codecarbon(cfg: RunConfig) -> None:
    if cfg.codecarbon and importlib.util.find_spec("codecarbon") is None:
        raise MissingExtraError(
            missing_sentence(
                "CodeCarbon was asked for (--codecarbon or codecarbon: true) and",
                "codecarbon",
                instead="turn it off",
            )
        )


def check_model(cfg: RunConfig) -> None:
    """The model exists and takes the run's images: a torchvision name is looked up; a factory,
    any model outside the reference study, or another image size is built on the CPU and fed
    one image (cached, so a sweep builds each model once)."""
    from wattlab.train.config import DEFAULT_IMAGE_SIZE, MODELS, NUM_CLASSES
    from wattlab.train.models import check_model as check_built
    from wattlab.train.models import check_model_name

    check_model_name(cfg.model)
    if cfg.model in MODELS and cfg.image_size == DEFAULT_IMAGE_SIZE:
        return  # the reference study's models, known to work on 32x32 images
    check_built(
        cfg.model, stem=cfg.stem, num_classes=NUM_CLASSES[cfg.dataset], image_size=cfg.image_size
    )


def check_inputs(cfg: RunConfig, *, open_files: bool = True) -> None:
    """The checks of one configuration that need no database and no GPU (sweeps run them
    for every planned run before the sweep starts; a dry run opens no data file)."""
    if cfg.device == "cpu" and cfg.precision == "amp-fp16":
        raise ConfigError("precision 'amp-fp16' needs a CUDA GPU; on the CPU use fp32 or amp-bf16.")
    check_codecarbon(cfg)
    check_budget(cfg)
    require("torch", "train", "training a model")  # one sentence before anything imports it
    check_model(cfg)
    check_dataset(cfg, open_files=open_files)


def preflight(cfg: RunConfig, db_path: str | Path) -> None:
    """Every check that can fail on user input, before anything is set or written."""
    from wattlab.experiment.db.store import check_writable_database

    check_writable_database(db_path)  # wattlab's, intact, writable (or its folder is)
    check_inputs(cfg)
    check_devices(cfg)
