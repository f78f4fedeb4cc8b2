"""The Lightning callback with a real tiny LightningModule on the CPU, logged through a real
CSVLogger and stored in a wattlab database."""

from __future__ import annotations

import csv

import pytest

pl = pytest.importorskip("pytorch_lightning")
import torch  # noqa: E402
from pytorch_lightning.loggers import CSVLogger  # noqa: E402

from wattlab.experiment.db.store import open_store  # noqa: E402
from wattlab.integrations.lightning import WattlabCallback, precision_name  # noqa: E402

pytestmark = pytest.mark.slow


class Tiny(pl.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        acc = (self.net(x).argmax(-1) == y).float().mean()
        self.log("val_acc", acc)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def loader(n: int, seed: int) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def test_fit_logs_energy_to_the_loggers_and_stores_the_run(tmp_path):
    db = tmp_path / "wattlab.db"
    callback = WattlabCallback(db=db, interval_s=0.02)
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=CSVLogger(tmp_path, name="csv"),
        callbacks=[callback],
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
    )
    trainer.fit(Tiny(), loader(32, 0), loader(16, 1))

    kinds = [next(iter(m)).split("/")[1] for m in callback.logged]
    # each epoch's validation ends inside that epoch; the sanity check is not metered
    assert kinds == ["eval", "epoch", "eval", "epoch", "train"]
    total = callback.logged[-1]
    assert total["wattlab/train/energy_j"] > 0
    by_prov = sum(
        total[f"wattlab/train/energy_{p}_j"] for p in ("measured", "sampled", "estimated")
    )
    assert by_prov == pytest.approx(total["wattlab/train/energy_j"])

    with open(trainer.logger.log_dir + "/metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    logged = [float(r["wattlab/epoch/energy_j"]) for r in rows if r.get("wattlab/epoch/energy_j")]
    assert len(logged) == 2 and all(e > 0 for e in logged)
    assert any(r.get("wattlab/train/co2e_kg") for r in rows)

    with open_store(db, create=False) as store:
        run = store.runs().iloc[0]
        windows = store.windows([callback.run_id])
    assert run["model"] == "Tiny" and run["precision"] == "fp32" and run["device"] == "cpu"
    assert run["batch_size"] == 8 and run["epochs"] == 2.0 and run["samples"] == 8 * 8
    assert run["energy_total_j"] == pytest.approx(total["wattlab/train/energy_j"])
    assert 0.0 <= run["accuracy"] <= 1.0 and run["train_loss"] > 0
    assert '"lr": 0.1' in run["config_json"]
    assert sorted(windows["name"]) == ["epoch", "epoch", "eval", "eval", "train"]


def test_precision_names():
    assert precision_name("32-true") == "fp32"
    assert precision_name("bf16-mixed") == "amp-bf16"
    assert precision_name("16-mixed") == "amp-fp16"
    assert precision_name("bf16-true") == "bf16"
