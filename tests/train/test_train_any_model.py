"""Any model: torchvision names beyond the reference seven, factories, image sizes, and the
features PRE reads from the module itself (checked against published counts)."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from wattlab.errors import ConfigError
from wattlab.estimate.features import clear_model_cost_cache, config_features, model_cost
from wattlab.experiment.runs.checks import check_inputs
from wattlab.train import data
from wattlab.train.config import NOT_HASHED, RunConfig, make_run_config
from wattlab.train.data import DeviceData, plan_epoch, synthetic_dataset
from wattlab.train.factory import build_from_factory, load_factory
from wattlab.train.models import build_model, check_model, count_parameters, profile_model

TINY_VIT = """
    import torch
    from torchvision.models import VisionTransformer

    def tiny_vit(num_classes):
        return VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
            num_classes=num_classes,
        )

    def mlp(num_classes):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, num_classes))

    def wrong_shape(num_classes):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 3))

    def raises(num_classes):
        raise ValueError("no such width")

    def not_a_module(num_classes):
        return "resnet18"

    NOT_CALLABLE = 3
"""


@pytest.fixture
def factories(tmp_path: Path) -> Path:
    path = tmp_path / "my_models.py"
    path.write_text(textwrap.dedent(TINY_VIT))
    return path


def test_a_factory_file_builds_a_fresh_module(factories: Path) -> None:
    model = build_from_factory(f"{factories}:mlp", num_classes=7)
    assert isinstance(model, nn.Sequential) and model[1].out_features == 7
    torch.manual_seed(0)  # build_model dispatches a ref with a colon to the factory, seeded
    a = build_model(f"{factories}:mlp", num_classes=5)
    torch.manual_seed(0)
    b = build_model(f"{factories}:mlp", num_classes=5)
    assert torch.equal(a[1].weight, b[1].weight)


def test_a_factory_in_a_package_module(factories: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(factories.parent))
    assert callable(load_factory("my_models:mlp"))
    check_model("my_models:mlp", num_classes=10)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nowhere/models.py:make", "model factory file 'nowhere/models.py' does not exist"),
        ("{file}:missing", "has no function 'missing'"),
        ("{file}:NOT_CALLABLE", "an object of type 'int', not a callable"),
        ("{file}:raises", "raised ValueError: no such width when called with num_classes=10"),
        ("{file}:not_a_module", "returned an object of type 'str', not a torch.nn.Module"),
        ("{file}:wrong_shape", r"returned shape \(1, 3\) .* needs logits of shape \(1, 10\)"),
        ("no_such_package_xyz.models:make", "module 'no_such_package_xyz.models' cannot be found"),
        ("{file}:", "must be FILE.py:FUNC or package.module:FUNC"),
    ],
)
def test_bad_factories_are_one_sentence(factories: Path, ref: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        check_model(ref.format(file=factories), num_classes=10)
    assert "\n" not in str(info.value)


def test_a_model_check_is_not_reused_for_another_file_of_the_same_relative_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is cached by the factory file's absolute path and version: a long-lived
    process that moves to another folder, or whose file was edited, checks again."""
    good = (
        "from torch import nn\n\ndef net(num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n"
    )
    bad = good.replace("nn.LazyLinear(num_classes)", "nn.LazyLinear(num_classes + 1)")
    for folder, text in (("a", good), ("b", bad)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mine.py").write_text(text)
    monkeypatch.chdir(tmp_path / "a")
    check_model("mine.py:net", num_classes=10, image_size=8)
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(ConfigError, match=r"shape \(1, 11\)"):
        check_model("mine.py:net", num_classes=10, image_size=8)
    monkeypatch.chdir(tmp_path / "a")  # the checked file, edited since: checked again
    (tmp_path / "a" / "mine.py").write_text(bad + "\n# edited\n")
    with pytest.raises(ConfigError, match=r"shape \(1, 11\)"):
        check_model("mine.py:net", num_classes=10, image_size=8)


def test_a_factory_file_that_fails_to_import(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import torch\nraise RuntimeError('cuda missing')\n")
    with pytest.raises(ConfigError, match="failed with RuntimeError: cuda missing"):
        load_factory(f"{path}:make")


def test_run_config_names_a_factory_run_by_its_ref(factories: Path) -> None:
    ref = f"{factories}:tiny_vit"
    cfg = make_run_config(model_factory=ref, epochs=1)
    assert cfg.model == ref and cfg.model_factory == ref and cfg.label().startswith(ref)
    again = RunConfig(**cfg.model_dump())  # a stored config_json reads back
    assert again == cfg
    with pytest.raises(ConfigError, match="give model or model_factory, not both"):
        make_run_config(model="resnet18", model_factory=ref, epochs=1)
    with pytest.raises(ConfigError, match="must be FILE.py:FUNC"):
        make_run_config(model_factory="tiny_vit", epochs=1)
    with pytest.raises(ConfigError, match="model_factory FILE.py:FUNC"):
        make_run_config(model="my models.py", epochs=1)


def test_new_fields_keep_old_hashes_at_their_defaults() -> None:
    cfg = make_run_config(model="resnet50", epochs=3, batch_size=128)
    old = cfg.model_dump(
        exclude={
            *NOT_HASHED,
            "model_factory",
            "image_size",
            "seed_pinned",
            "budget_s",
            "cpu_threads",
        }
    )
    blob = json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert cfg.config_hash() == hashlib.sha256(blob.encode()).hexdigest()[:16]
    bigger = make_run_config(model="resnet50", epochs=3, batch_size=128, image_size=64)
    assert bigger.config_hash() != cfg.config_hash()
    assert bigger.label().endswith("64px")
    pinned = make_run_config(model="resnet50", epochs=3, batch_size=128, seed_pinned=True)
    assert pinned.config_hash() != cfg.config_hash()


def test_check_inputs_refuses_unknown_models_and_bad_factories(factories: Path) -> None:
    with pytest.raises(ConfigError, match="unknown model 'densenet12'.*did you mean densenet121"):
        check_inputs(make_run_config(model="densenet12", epochs=1, device="cpu"))
    with pytest.raises(ConfigError, match="not a torch.nn.Module"):
        check_inputs(
            make_run_config(model_factory=f"{factories}:not_a_module", epochs=1, device="cpu")
        )
    check_inputs(make_run_config(model_factory=f"{factories}:tiny_vit", epochs=1, device="cpu"))


def test_vit_needs_a_patch_size_that_divides_the_image() -> None:
    with pytest.raises(ConfigError, match="16x16 patches.*multiple of 16") as info:
        build_model("vit_b_16", image_size=24)
    assert "\n" not in str(info.value)


def test_a_small_vit_is_named_by_patch_depth_and_width() -> None:
    model = build_model("vit_p8_d2_w128", num_classes=10, image_size=32)
    encoder = model.encoder.layers
    assert len(encoder) == 2
    assert encoder[0].self_attention.num_heads == 2 and encoder[0].self_attention.embed_dim == 128
    assert encoder[0].mlp[0].out_features == 4 * 128
    profile = profile_model(model, image_size=32)
    tokens = (32 // 8) ** 2 + 1
    assert profile.tokens_per_image == tokens
    # per layer: QK^T and attention x V, each tokens x tokens x width multiply-adds (2 FLOPs)
    assert profile.attention_flops_per_sample == 2 * 2 * (2 * tokens * tokens * 128)
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    check_inputs(
        make_run_config(model="vit_p8_d2_w128", device="cpu", batch_size=16, budget_samples=64)
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("vit_p3_d2_w128", "3x3 patches.*multiple of 3"),
        ("vit_p4_d2_w100", "multiple of 64"),
        ("vit_p4_d0_w128", "depth >= 1"),
    ],
)
def test_a_small_vit_that_cannot_be_built_is_one_sentence(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        build_model(name, num_classes=10, image_size=32)
    assert "\n" not in str(info.value)


def test_small_torchvision_models_beyond_the_seven_build_and_check() -> None:
    for name in ("shufflenet_v2_x0_5", "regnet_y_400mf"):
        check_model(name, num_classes=10, image_size=32)
    model = build_model("shufflenet_v2_x0_5", stem="cifar", num_classes=10)
    assert model.conv1[0].kernel_size == (3, 3)  # not a ResNet: its own stem is kept


def test_device_batches_are_resized_to_the_image_size() -> None:
    ds = synthetic_dataset(64, 16)
    dev = DeviceData(ds, torch.device("cpu"), image_size=48)
    plan = dev.prepare(plan_epoch(64, 16, seed=0, epoch=1))
    x, y = dev.train_batch(plan, 0)
    assert x.shape == (16, 3, 48, 48) and y.shape == (16,)
    test_x, _ = next(dev.test_batches(8))
    assert test_x.shape == (8, 3, 48, 48)
    same = DeviceData(ds, torch.device("cpu"), image_size=data.IMAGE_SHAPE[-1])
    assert same.resize_to is None


def test_profile_counts_attention_tokens_and_leaves_of_a_tiny_vit(factories: Path) -> None:
    model = build_model(f"{factories}:tiny_vit", num_classes=10)
    profile = profile_model(model, image_size=32)
    tokens = (32 // 8) ** 2 + 1  # 16 patches and the class token
    assert profile.tokens_per_image == tokens
    # QK^T and attention x V: 2 products of tokens x tokens x hidden multiply-adds, per layer
    assert profile.attention_flops_per_sample == 2 * 2 * (2 * tokens * tokens * 32)
    assert profile.forward_flops_per_sample > profile.attention_flops_per_sample
    assert profile.layers == sum(1 for m in model.modules() if not list(m.children()))
    assert profile.activation_elements_per_sample > 0


def test_features_of_a_factory_model_name_their_units(factories: Path) -> None:
    clear_model_cost_cache()
    row = config_features(
        model=f"{factories}:tiny_vit",
        gpus=1,
        precision="amp-bf16",
        epochs=1,
        gpu_name="H200",
        batch_size=128,
    ).iloc[0]
    cost = model_cost(f"{factories}:tiny_vit")
    assert row["tokens_per_image"] == 17
    assert row["attention_gflops_per_sample"] == pytest.approx(
        cost.attention_flops_per_sample / 1e9
    )
    assert row["gflops_per_sample"] == pytest.approx(cost.forward_flops_per_sample / 1e9)
    assert row["params"] == count_parameters(build_model(f"{factories}:tiny_vit"))
    assert row["activation_mb_per_sample"] == pytest.approx(
        cost.activation_elements_per_sample * 2 / 1e6
    )
    cnn = model_cost("resnet18")
    assert cnn.tokens_per_image == 0 and cnn.attention_flops_per_sample == 0
    clear_model_cost_cache()


# -- known counts (torchvision's published figures); the big models take seconds each -----


@pytest.mark.slow
def test_resnet_family_counts_and_cifar_stem() -> None:
    assert count_parameters(build_model("resnet50", stem="imagenet", num_classes=1000)) == (
        25_557_032
    )
    assert count_parameters(build_model("resnet18", stem="imagenet", num_classes=1000)) == (
        11_689_512
    )
    cifar50 = build_model("resnet50", stem="cifar", num_classes=10)
    assert count_parameters(cifar50) == pytest.approx(23.5e6, rel=0.01)
    imagenet = profile_model(build_model("resnet50", stem="imagenet", num_classes=1000), 224)
    assert imagenet.forward_flops_per_sample / 2 == pytest.approx(4.09e9, rel=0.01)  # GMACs
    assert imagenet.tokens_per_image == 0
    for name in ("resnext50_32x4d", "wide_resnet50_2"):
        model = build_model(name, stem="cifar")
        assert model.conv1.kernel_size == (3, 3) and isinstance(model.maxpool, nn.Identity)


@pytest.mark.slow
def test_vit_b_16_counts() -> None:
    at_224 = build_model("vit_b_16", num_classes=1000, image_size=224)
    assert count_parameters(at_224) == pytest.approx(86.57e6, rel=0.001)
    profile = profile_model(at_224, 224)
    assert profile.tokens_per_image == 197
    assert profile.forward_flops_per_sample / 2 == pytest.approx(17.56e9, rel=0.01)  # GMACs
    # 12 layers x 2 products x 197 x 197 tokens x 768 wide, in multiply-adds
    assert profile.attention_flops_per_sample / 2 == 12 * 2 * 197 * 197 * 768
    check_model("vit_b_16", num_classes=10, image_size=32)  # 4 patches + class token at 32x32
    assert model_cost("vit_b_16").tokens_per_image == 5
