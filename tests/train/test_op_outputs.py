"""PRE's activation traffic (issue 47): the elements every operator of a forward pass writes,
not the outputs of leaf modules."""

from __future__ import annotations

import torch
from torch import nn

from wattlab.train.models import mha_fastpath_off, profile_model
from wattlab.train.op_outputs import OpOutputs


def _written(module: nn.Module, x: torch.Tensor) -> OpOutputs:
    counter = OpOutputs()
    with torch.no_grad(), mha_fastpath_off(), counter:
        module.eval()(x)
    return counter


def test_modules_that_return_their_input_and_views_write_nothing() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(8, 16)
    plain = nn.Sequential(linear)
    padded = nn.Sequential(nn.Identity(), linear, nn.Dropout(0.0), nn.Unflatten(1, (4, 4)),
                           nn.Flatten(), nn.Identity())  # fmt: skip
    x = torch.zeros(3, 8)
    assert _written(plain, x).elements == 3 * 16
    assert _written(padded, x).elements == 3 * 16  # the leaf outputs would count 6 x 48
    assert _written(padded, x).ops == 1


def test_the_work_inside_multi_head_attention_counts() -> None:
    width, tokens = 32, 5
    attention = nn.MultiheadAttention(width, num_heads=4, batch_first=True)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = attention

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attention(x, x, x, need_weights=False)[0]

    written = _written(SelfAttention(), torch.zeros(1, tokens, width)).elements
    # the leaf out_proj alone writes tokens x width; the query/key/value projection writes 3x
    # that, the attention's output once more
    assert written >= (1 + 3 + 1) * tokens * width


def test_profile_counts_written_elements_not_leaf_outputs() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Dropout(0.0), nn.Identity(),
        nn.Flatten(), nn.Linear(4 * 32 * 32, 10),
    )  # fmt: skip
    profile = profile_model(model, image_size=32)
    conv, relu, linear = 4 * 32 * 32, 4 * 32 * 32, 10
    assert profile.activation_elements_per_sample == conv + relu + linear
    assert profile.layers == 6  # the leaves still count as the launch proxy


def test_autocast_adds_the_casts_an_amp_step_launches() -> None:
    one = profile_model(nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU()), 8)
    two = profile_model(
        nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.LayerNorm(16), nn.Linear(16, 4)),
        8,
    )
    # under autocast a Linear casts its input and weight (and bias) to bfloat16 first
    assert one.kernels == 2 and one.kernels_autocast >= 2 + 2
    assert two.kernels_autocast - two.kernels > one.kernels_autocast - one.kernels


def test_an_amp_row_counts_its_autocast_kernels(monkeypatch) -> None:
    from wattlab.estimate import features

    features.clear_model_cost_cache()
    amp = features.config_features(model="vit_p4_d6_w256", gpus=1, precision="amp-bf16",
                                   epochs=1, gpu_name="H200", batch_size=128).iloc[0]  # fmt: skip
    fp32 = features.config_features(model="vit_p4_d6_w256", gpus=1, precision="fp32",
                                    epochs=1, gpu_name="H200", batch_size=128).iloc[0]  # fmt: skip
    cost = features.model_cost("vit_p4_d6_w256")
    assert amp["kernels"] == cost.kernels_autocast > fp32["kernels"] == cost.kernels
    assert amp["layers"] == fp32["layers"] == cost.layers
    features.clear_model_cost_cache()
