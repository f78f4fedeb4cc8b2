"""The training loop on the CPU: windows, budget, warm-up restore, precision, metrics."""

from __future__ import annotations

import logging

import pytest
import torch
from sklearn.metrics import f1_score
from torch import nn

from wattlab.errors import ConfigError
from wattlab.processes import usable_cores
from wattlab.train import loop
from wattlab.train.config import make_run_config
from wattlab.train.data import synthetic_dataset
from wattlab.train.distributed import DistContext
from wattlab.train.loop import (
    EpochStats,
    lr_at,
    macro_scores,
    plan_budget,
    run_training,
)
from wattlab.train.models import build_model, count_parameters

SOLO = DistContext()


class Recorder:
    """WindowHooks that writes down every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def begin(self, name: str, epoch: int | None = None) -> None:
        self.calls.append(("begin", name, epoch))

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
        self.calls.append(("end", name, epoch, samples))


def small_cnn(dropout: float = 0.0) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(4),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(dropout),
        nn.Linear(16, 10),
    )


def cpu_config(**values):
    base = dict(device="cpu", train_samples=256, test_samples=50, batch_size=64, warmup_steps=0)
    base.update(values)
    if "epochs" not in base and "budget_samples" not in base:
        base["epochs"] = 1
    return make_run_config(**base)


@pytest.mark.slow
def test_windows_come_in_order_with_global_sample_counts():
    # 256 samples / 64 = 4 steps an epoch; a budget of 394 samples = 6 steps = 1.5 epochs
    cfg = cpu_config(budget_samples=394, warmup_steps=2)
    hooks, seen = Recorder(), []
    torch.manual_seed(0)
    result = run_training(cfg, SOLO, hooks, seen.append, model=small_cnn())
    assert hooks.calls == [
        ("begin", "run", None),
        ("begin", "warmup", None),
        ("end", "warmup", None, 128),
        ("begin", "budget", None),
        ("begin", "epoch", 1),
        ("end", "epoch", 1, 256),
        ("begin", "epoch_eval", 1),  # the fixed subset: min(epoch_eval_samples, 50 test)
        ("end", "epoch_eval", 1, 50),
        ("begin", "epoch", 2),
        ("end", "epoch", 2, 128),
        ("begin", "epoch_eval", 2),
        ("end", "epoch_eval", 2, 50),
        ("end", "budget", None, 384),
        ("begin", "eval", None),
        ("end", "eval", None, 50),
        ("end", "run", None, 128 + 384),
    ]
    assert result.samples == 384 and result.steps == 6 and result.steps_per_epoch == 4
    assert result.epochs_completed == 1.5 and result.warmup_samples == 128
    assert result.test_samples == 50 and result.world_size == 1
    assert [s.epoch for s in seen] == [1, 2] and [s.samples for s in seen] == [256, 128]
    assert all(isinstance(s, EpochStats) and s.duration_s > 0 for s in seen)
    assert all(s.eval_accuracy is not None and 0 <= s.eval_accuracy <= 1 for s in seen)
    assert result.per_epoch == seen and result.train_loss == seen[-1].train_loss
    assert 0 <= result.accuracy <= 1 and 0 <= result.f1_macro <= 1
    assert result.params == count_parameters(small_cnn())


@pytest.mark.slow
def test_no_warmup_window_without_warmup_steps():
    hooks = Recorder()
    run_training(cpu_config(epoch_eval_samples=0), SOLO, hooks, model=small_cnn())
    assert [c[1] for c in hooks.calls if c[0] == "begin"] == ["run", "budget", "epoch", "eval"]


@pytest.mark.slow
def test_the_loss_is_read_once_per_epoch_not_per_step(monkeypatch):
    """No host-device sync inside a step: Tensor.item runs once per epoch in the budget."""
    counts = {"item": 0}
    original = torch.Tensor.item

    def counting_item(self):
        counts["item"] += 1
        return original(self)

    class Window(Recorder):
        def begin(self, name, epoch=None):
            if name == "budget":
                counts["item"] = 0
                monkeypatch.setattr(torch.Tensor, "item", counting_item)
            super().begin(name, epoch)

        def end(self, name, epoch=None, samples=0):
            if name == "budget":
                monkeypatch.setattr(torch.Tensor, "item", original)
            super().end(name, epoch, samples)

    run_training(cpu_config(epochs=3), SOLO, Window(), model=small_cnn())
    assert counts["item"] == 3  # 12 steps, 3 epochs


def _final_weights(cfg, **kwargs) -> dict[str, torch.Tensor]:
    torch.manual_seed(123)
    model = small_cnn(dropout=0.5)  # BatchNorm statistics, and dropout: the RNG is restored too
    run_training(cfg, SOLO, model=model, **kwargs)
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.slow
def test_warmup_restore_leaves_the_budget_bitwise_identical(monkeypatch):
    data = synthetic_dataset(128, 20)
    cold = _final_weights(cpu_config(batch_size=32, warmup_steps=0), dataset=data)
    warm = _final_weights(cpu_config(batch_size=32, warmup_steps=3), dataset=data)
    assert cold.keys() == warm.keys()
    assert all(torch.equal(cold[k], warm[k]) for k in cold), "warm-up leaked into the budget"
    # the comparison can fail: without the restore the warm-up steps change the result
    monkeypatch.setattr(loop, "_restore", lambda *args: None)
    leaked = _final_weights(cpu_config(batch_size=32, warmup_steps=3), dataset=data)
    assert not all(torch.equal(cold[k], leaked[k]) for k in cold)


@pytest.mark.slow
def test_runs_are_reproducible_from_the_seed():
    data = synthetic_dataset(128, 20)
    cfg = cpu_config(model="resnet18", stem="imagenet", seed=5)  # 2 steps of 64
    a = run_training(cfg, SOLO, dataset=data)
    b = run_training(cfg, SOLO, dataset=data)
    assert a.per_epoch[0].train_loss == b.per_epoch[0].train_loss
    assert a.accuracy == b.accuracy
    assert a.params == count_parameters(build_model("resnet18", stem="imagenet"))


@pytest.mark.slow
def test_precision_modes_on_the_cpu(caplog):
    with pytest.raises(ConfigError, match="amp-fp16"):
        run_training(cpu_config(precision="amp-fp16"), SOLO, model=small_cnn())
    with caplog.at_level(logging.INFO, logger="wattlab.train.loop"):
        run_training(cpu_config(precision="tf32"), SOLO, model=small_cnn())
    assert "plain fp32" in caplog.text
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    run_training(cpu_config(precision="fp32"), SOLO, model=small_cnn())
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    bf16 = run_training(cpu_config(precision="amp-bf16"), SOLO, model=small_cnn())
    assert bf16.samples == 256 and bf16.per_epoch[0].train_loss > 0


def test_mismatched_process_counts_and_devices_are_config_errors():
    with pytest.raises(ConfigError, match="2 processes"):
        run_training(cpu_config(nproc=2), SOLO, model=small_cnn())
    cuda = DistContext(device=torch.device("cuda", 0))
    with pytest.raises(ConfigError, match="'cpu'"):
        run_training(cpu_config(), cuda, model=small_cnn())


def test_budget_plan():
    by_epochs = plan_budget(cpu_config(epochs=3, batch_size=64), train_size=1000)
    assert (by_epochs.steps, by_epochs.steps_per_epoch, by_epochs.samples) == (45, 15, 2880)
    assert by_epochs.epochs == 3 and by_epochs.steps_in_epoch(3) == 15
    by_samples = plan_budget(cpu_config(budget_samples=2000, batch_size=64), train_size=1000)
    assert (by_samples.steps, by_samples.samples, by_samples.epochs) == (31, 1984, 3)
    assert [by_samples.steps_in_epoch(e) for e in (1, 2, 3)] == [15, 15, 1]
    with pytest.raises(ConfigError, match="less than one global batch"):
        plan_budget(cpu_config(budget_samples=10, batch_size=64), train_size=1000)
    with pytest.raises(ConfigError, match="larger than the 50 training samples"):
        plan_budget(cpu_config(batch_size=64), train_size=50)


def test_learning_rate_schedule():
    total, peak = 2000, 0.4
    lrs = [lr_at(s, total, peak) for s in range(total)]
    warm = round(loop.LR_WARMUP_FRACTION * total)
    assert warm == 100  # 5 % of a long budget
    assert lrs[:warm] == pytest.approx([peak * (s + 1) / warm for s in range(warm)])
    assert max(lrs) == pytest.approx(peak) and lrs[warm] == pytest.approx(peak)
    assert all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1 :], strict=False))
    assert 0 < lrs[-1] < 0.01 * peak
    # short budgets still warm up over several steps: a fifth of them, up to 50
    assert [lr_at(s, 20, 1.0) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lr_at(49, 400, 1.0) == pytest.approx(1.0) and lr_at(48, 400, 1.0) < 1.0


def test_macro_scores_match_scikit_learn():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (500,), generator=g)
    pred = torch.where(torch.rand(500, generator=g) < 0.6, y, torch.randint(0, 8, (500,)))
    confusion = torch.bincount(y * 10 + pred, minlength=100).view(10, 10)
    accuracy, f1 = macro_scores(confusion)
    assert accuracy == pytest.approx(float((y == pred).float().mean()))
    assert f1 == pytest.approx(f1_score(y.numpy(), pred.numpy(), average="macro"))
    assert macro_scores(torch.zeros(10, 10, dtype=torch.int64)) == (0.0, 0.0)


def test_a_timed_budget_runs_the_steps_its_seconds_take_at_the_warm_ups_pace():
    from wattlab.train.loop import Budget, timed_budget

    provisional = Budget(steps=15, steps_per_epoch=15, batch_size=64)
    # the median of the last three warm-up steps (0.02 s; the slow first one is autotuning)
    timed = timed_budget(1.0, [3.0, 0.021, 0.019, 0.02], provisional, SOLO)
    assert (timed.steps, timed.steps_per_epoch, timed.samples) == (50, 15, 3200)
    assert timed.epochs == 4 and timed.steps_in_epoch(4) == 5
    assert timed_budget(0.001, [0.02] * 3, provisional, SOLO).steps == 1  # at least one step
    # the configuration: one budget of three, and a warm-up long enough to time a step
    with pytest.raises(ConfigError, match="not several"):
        make_run_config(device="cpu", budget_s=2.0, epochs=1, warmup_steps=3)
    with pytest.raises(ConfigError, match="warmup_steps >= 3"):
        make_run_config(device="cpu", budget_s=2.0, warmup_steps=1)
    cfg = make_run_config(device="cpu", budget_s=2.0, warmup_steps=3)
    assert cfg.config_hash() != make_run_config(device="cpu", budget_s=3.0).config_hash()
    # a configuration without it keeps the hash it had before budget_s existed
    assert "budget_s" not in cfg.model_copy(update={"budget_s": None, "epochs": 1}).model_dump(
        exclude_none=True
    )


@pytest.mark.slow
def test_a_timed_run_trains_the_steps_its_warm_up_timed(monkeypatch):
    data = synthetic_dataset(512, 64)
    cfg = make_run_config(
        device="cpu", budget_s=1.5, warmup_steps=5, batch_size=32, train_samples=512,
        test_samples=64, epoch_eval_samples=0,
    )  # fmt: skip
    planned = []

    def spy(budget_s, step_times, budget, dist):
        planned.append((budget_s, list(step_times), loop_timed(budget_s, step_times, budget, dist)))
        return planned[-1][2]

    loop_timed = loop.timed_budget
    monkeypatch.setattr(loop, "timed_budget", spy)
    result = run_training(cfg, SOLO, model=small_cnn(), dataset=data)
    ((asked, step_times, budget),) = planned
    assert asked == 1.5 and 3 <= len(step_times) <= 5  # the warm-up's own steps, timed
    assert (result.steps, result.samples) == (budget.steps, budget.steps * 32)
    assert [e.samples for e in result.per_epoch][-1] > 0


def test_cpu_threads_hold_for_the_run_and_the_process_gets_its_own_back(monkeypatch):
    """``cpu_threads`` sets torch's intra-op threads for the run (the demo's 1: beside other
    work OpenMP's spinning threads cost 3-6x, docs/engine.md) and restores them after it,
    also after a failure, so a warm worker's next run starts as the process was."""
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    seen: list[int] = []
    cfg = cpu_config(cpu_threads=want, epochs=2, train_samples=128)
    run_training(cfg, SOLO, None, lambda _stats: seen.append(torch.get_num_threads()),
                 model=small_cnn())  # fmt: skip
    assert seen == [want, want]  # every epoch of the run
    assert torch.get_num_threads() == before

    def fails(_stats: EpochStats) -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run_training(cfg, SOLO, None, fails, model=small_cnn())
    assert torch.get_num_threads() == before
    default = cpu_config(epochs=1, train_samples=128)
    monkeypatch.setattr(loop, "_load_1min", lambda: 0.0)  # an idle machine
    run_training(default, SOLO, None, lambda _s: seen.append(torch.get_num_threads()),
                 model=small_cnn())  # fmt: skip
    assert seen[-1] == min(before, usable_cores())  # unset, idle: torch's own number
    monkeypatch.setattr(loop, "_load_1min", lambda: 64.0)  # every core busy
    run_training(default, SOLO, None, lambda _s: seen.append(torch.get_num_threads()),
                 model=small_cnn())  # fmt: skip
    assert seen[-1] == 1 and torch.get_num_threads() == before  # unset, busy: one thread


@pytest.mark.parametrize(
    ("cores", "load", "current", "threads"),
    [
        (2, 0.0, 2, 2),  # idle: torch's own number
        (2, 5.0, 2, 1),  # issue 48: beside 2 busy loops, one thread
        (16, 4.2, 16, 12),  # the cores left free, rounded
        (16, 0.0, 4, 4),  # never more than torch's own (OMP_NUM_THREADS, say)
        (1, 0.0, 1, 1),
    ],
)
def test_a_cpu_run_trains_on_the_cores_left_free(cores, load, current, threads):
    assert loop.free_threads(cores, load, current) == threads


def test_cpu_threads_are_checked_labelled_and_hashed_only_when_set():
    plain = cpu_config()
    assert "thread" not in plain.label()
    one = cpu_config(cpu_threads=1)
    assert one.label() == plain.label().replace("1xCPU", "1xCPU 1-thread")
    assert one.config_hash() != plain.config_hash()
    assert cpu_config(cpu_threads=None).config_hash() == plain.config_hash()  # stored sweeps
    with pytest.raises(ConfigError, match="at least 1"):
        cpu_config(cpu_threads=0)
    with pytest.raises(ConfigError, match="--cpu-threads applies to --device cpu"):
        make_run_config(device="cuda", epochs=1, cpu_threads=2)
