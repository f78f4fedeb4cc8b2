"""The training workload: the experiment run once per configuration.

- ``wattlab.train.data``: datasets (synthetic shapes, CIFAR-10) and the device-resident pipeline.
- ``wattlab.train.models``: torchvision models with a CIFAR stem, parameter and FLOP counts.
- ``wattlab.train.loop``: ``run_training(cfg, dist, windows, on_epoch) -> TrainResult``.
- ``wattlab.train.distributed``: ``init_distributed``, ``DistContext``, ``torchrun_command``.

Nothing is imported here, so ``import wattlab.train`` does not load torch.
"""
