"""Without torch, `wattlab estimate` uses a model's cost as the shipped reference data holds it,
says so, and for a model the data does not hold names the ones it does (issue 39)."""

from __future__ import annotations

import pytest

from wattlab.estimate import features
from wattlab.extras import MissingExtraError


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch):
    real = features.importlib.import_module

    def missing(name: str, *args: object) -> object:
        if name == "wattlab.train.models":
            raise ImportError("No module named 'torch'", name="torch")
        return real(name, *args)

    features.clear_model_cost_cache()
    monkeypatch.setattr(features.importlib, "import_module", missing)
    yield
    features.clear_model_cost_cache()


def test_a_model_the_reference_holds_is_costed_from_it(no_torch) -> None:
    cost = features.model_cost("resnet50")
    assert cost.gflops_per_sample == pytest.approx(2.596, abs=1e-3)
    assert cost.params > 20_000_000 and cost.source == features.REFERENCE_SOURCE
    assert cost.layers is None  # not stored there: stays unknown


def test_a_model_it_does_not_hold_names_the_ones_it_does(no_torch) -> None:
    with pytest.raises(MissingExtraError) as caught:
        features.model_cost("my_net")
    text = str(caught.value)
    assert "'my_net'" in text and "resnet50" in text and "install it with:" in text
    assert "record model_gflops_per_sample" not in text
    assert text.count(".") >= 1 and "\n" not in text


def test_the_flops_method_says_where_the_cost_came_from(no_torch) -> None:
    from wattlab.estimate.predict import estimate_all

    found = estimate_all(model="resnet50", gpus=1, precision="fp32", epochs=1, gpu_name="H200")
    flops = next(e for e in found if e.method == "flops")
    assert features.REFERENCE_SOURCE in flops.notes and "2.6 GFLOP/image" in flops.notes


@pytest.mark.slow  # fits PRE (when this session's cache holds no fit yet)
def test_pre_says_its_fit_without_torch_is_worse_and_why(no_torch) -> None:
    """Issue 48: without torch PRE's CV error was 30.1 % against 9.9 % with it, and nothing said
    so or why."""
    from wattlab.estimate.methods.pre import WITHOUT_TORCH
    from wattlab.estimate.predict import estimate_all
    from wattlab.estimate.sources import pre_fit as source_pre_fit

    pre_fit, _ = source_pre_fit(None, None)  # the shipped reference, as `wattlab estimate` fits
    found = estimate_all(model="resnet50", gpus=1, precision="fp32", epochs=1, gpu_name="H200",
                         pre_fit=pre_fit)  # fmt: skip
    pre = next(e for e in found if e.method == "pre")
    assert pre.ok and WITHOUT_TORCH in pre.notes
    assert "activations and layers" in pre.notes and "a worse fit than with torch" in pre.notes
